// Command sessions-create is the Lambda function for the sessions-create route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-create") }
