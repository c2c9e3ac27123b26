// Command avatars-preview is the Lambda function for the avatars-preview route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("avatars-preview") }
