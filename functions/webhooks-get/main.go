// Command webhooks-get is the Lambda function for the webhooks-get route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("webhooks-get") }
