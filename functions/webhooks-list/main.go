// Command webhooks-list is the Lambda function for the webhooks-list route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("webhooks-list") }
