// Command webhooks-update is the Lambda function for the webhooks-update route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("webhooks-update") }
