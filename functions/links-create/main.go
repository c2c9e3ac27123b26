// Command links-create is the Lambda function for the links-create route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("links-create") }
