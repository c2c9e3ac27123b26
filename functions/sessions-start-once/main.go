// Command sessions-start-once is the Lambda function for the sessions-start-once route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-start-once") }
