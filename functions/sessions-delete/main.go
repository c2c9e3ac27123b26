// Command sessions-delete is the Lambda function for the sessions-delete route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-delete") }
