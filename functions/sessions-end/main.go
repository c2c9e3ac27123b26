// Command sessions-end is the Lambda function for the sessions-end route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-end") }
