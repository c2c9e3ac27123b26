// Command links-list is the Lambda function for the links-list route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("links-list") }
