// Command agents-create is the Lambda function for the agents-create route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("agents-create") }
