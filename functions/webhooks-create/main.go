// Command webhooks-create is the Lambda function for the webhooks-create route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("webhooks-create") }
