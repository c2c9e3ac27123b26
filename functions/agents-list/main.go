// Command agents-list is the Lambda function for the agents-list route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("agents-list") }
