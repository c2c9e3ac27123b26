// Command links-start-session is the Lambda function for the links-start-session route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("links-start-session") }
