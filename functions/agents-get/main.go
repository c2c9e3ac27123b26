// Command agents-get is the Lambda function for the agents-get route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("agents-get") }
