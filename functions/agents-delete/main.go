// Command agents-delete is the Lambda function for the agents-delete route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("agents-delete") }
