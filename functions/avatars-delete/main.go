// Command avatars-delete is the Lambda function for the avatars-delete route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("avatars-delete") }
