// Command avatars-update is the Lambda function for the avatars-update route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("avatars-update") }
