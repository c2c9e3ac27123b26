// Command webhooks-retry is the Lambda function for the webhooks-retry route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("webhooks-retry") }
