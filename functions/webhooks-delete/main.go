// Command webhooks-delete is the Lambda function for the webhooks-delete route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("webhooks-delete") }
