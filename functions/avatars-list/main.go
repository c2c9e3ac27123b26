// Command avatars-list is the Lambda function for the avatars-list route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("avatars-list") }
