// Command livekit-webhook is the Lambda function for the livekit-webhook route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("livekit-webhook") }
