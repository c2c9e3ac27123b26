// Command webhooks-deliveries is the Lambda function for the webhooks-deliveries route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("webhooks-deliveries") }
