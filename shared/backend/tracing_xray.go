//go:build xray

package backend

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
)

// instrumentAWS records every AWS SDK call as an X-Ray subsegment of the
// Lambda invocation's trace. It costs about 18 MB of binary (the X-Ray SDK
// brings aws-sdk-go v1 and gRPC), so it is opt-in: `make build XRAY=1`.
func instrumentAWS(cfg *aws.Config) { awsv2.AWSV2Instrumentor(&cfg.APIOptions) }
