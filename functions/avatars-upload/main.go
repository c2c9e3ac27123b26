// Command avatars-upload is the Lambda function for the avatars-upload route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("avatars-upload") }
