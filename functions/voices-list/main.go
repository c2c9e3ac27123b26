// Command voices-list is the Lambda function for the voices-list route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("voices-list") }
