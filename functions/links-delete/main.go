// Command links-delete is the Lambda function for the links-delete route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("links-delete") }
