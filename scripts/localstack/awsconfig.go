package localstack

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Region is the region every local client signs for.
const Region = "us-east-1"

// AWSConfig returns a client configuration aimed at a local endpoint with
// static dummy credentials, so no request or credential lookup leaves the
// machine. The ctx parameter keeps the signature of config.LoadDefaultConfig
// for callers that switch between the two.
func AWSConfig(ctx context.Context, endpoint string) aws.Config {
	return aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local-secret", ""),
		BaseEndpoint: aws.String(endpoint),
		// Local stand-ins do not understand the streaming checksum trailers
		// the SDK adds by default; AWS accepts requests without them.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
	}
}

// Client returns a client for d.
func (d *DynamoDB) Client(ctx context.Context) *dynamodb.Client {
	return dynamodb.NewFromConfig(AWSConfig(ctx, d.Endpoint))
}

// Client returns a client for q.
func (q *SQS) Client(ctx context.Context) *sqs.Client {
	return sqs.NewFromConfig(AWSConfig(ctx, q.Endpoint))
}

// Client returns a path-style client for s.
func (s *S3) Client(ctx context.Context) *s3.Client {
	return S3Client(AWSConfig(ctx, s.Endpoint))
}

// S3Client builds an S3 client that addresses buckets by path
// (http://host/bucket/key), which local S3 servers need.
func S3Client(cfg aws.Config, optFns ...func(*s3.Options)) *s3.Client {
	return s3.NewFromConfig(cfg, append([]func(*s3.Options){func(o *s3.Options) { o.UsePathStyle = true }}, optFns...)...)
}
