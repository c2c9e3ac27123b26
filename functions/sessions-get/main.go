// Command sessions-get is the Lambda function for the sessions-get route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-get") }
