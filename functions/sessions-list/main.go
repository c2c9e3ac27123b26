// Command sessions-list is the Lambda function for the sessions-list route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-list") }
