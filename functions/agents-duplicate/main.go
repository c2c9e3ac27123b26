// Command agents-duplicate is the Lambda function for the agents-duplicate route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("agents-duplicate") }
