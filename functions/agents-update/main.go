// Command agents-update is the Lambda function for the agents-update route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("agents-update") }
