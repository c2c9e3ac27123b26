// Command sessions-extend is the Lambda function for the sessions-extend route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("sessions-extend") }
