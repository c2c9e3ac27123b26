// Command links-update is the Lambda function for the links-update route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("links-update") }
