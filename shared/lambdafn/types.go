package lambdafn

import "github.com/aws/aws-lambda-go/events"

// EventV2 and ResponseV2 are API Gateway HTTP API payload format 2.0.
type (
	EventV2    = events.APIGatewayV2HTTPRequest
	ResponseV2 = events.APIGatewayV2HTTPResponse
)
