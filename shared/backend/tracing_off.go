//go:build !xray

package backend

import "github.com/aws/aws-sdk-go-v2/aws"

// instrumentAWS is off in default builds: Lambda's active tracing still
// records each invocation; build with -tags xray for per-call subsegments.
func instrumentAWS(*aws.Config) {}
