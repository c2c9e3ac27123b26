// Command sessions-start is the Lambda function for the sessions-start route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-start") }
