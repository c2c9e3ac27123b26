// Command webhook-deliver is the Lambda function that consumes the webhook
// delivery queue: each message is one signed attempt.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.ServeWebhookDeliveries() }
