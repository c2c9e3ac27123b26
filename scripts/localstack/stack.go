package localstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"gopkg.in/yaml.v3"
)

// Endpoints are the local stand-ins' addresses.
type Endpoints struct {
	DynamoDB, SQS, S3 string
}

// CreateStack creates every DynamoDB table, SQS queue and S3 bucket that
// template.yaml declares, naming each prefix-LogicalId, and returns the
// environment the functions get there (Globals.Function.Environment with
// each !Ref resolved, plus the local endpoints). Existing resources are kept,
// so a second `make run` finds its data again. template.yaml stays the one
// definition of the tables for AWS and for the local stack.
func CreateStack(ctx context.Context, templatePath string, ep Endpoints, prefix string) (map[string]string, error) {
	raw, err := os.ReadFile(templatePath)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", templatePath, err)
	}
	root := doc.Content[0]
	resources := mapValue(root, "Resources")
	if resources == nil {
		return nil, fmt.Errorf("%s has no Resources", templatePath)
	}
	refs := map[string]string{} // logical id -> what !Ref yields locally
	ddb := dynamodb.NewFromConfig(AWSConfig(ctx, ep.DynamoDB))
	sqsClient := sqs.NewFromConfig(AWSConfig(ctx, ep.SQS))
	s3Client := S3Client(AWSConfig(ctx, ep.S3))

	// Queues without a redrive policy first: a redrive names its DLQ's ARN.
	type res struct {
		id    string
		typ   string
		props *yaml.Node
	}
	var list []res
	for i := 0; i+1 < len(resources.Content); i += 2 {
		r := resources.Content[i+1]
		list = append(list, res{resources.Content[i].Value, scalar(mapValue(r, "Type")), mapValue(r, "Properties")})
	}
	sort.SliceStable(list, func(i, j int) bool {
		return mapValue(list[i].props, "RedrivePolicy") == nil && mapValue(list[j].props, "RedrivePolicy") != nil
	})
	arns := map[string]string{}
	for _, r := range list {
		name := prefix + "-" + r.id
		switch r.typ {
		case "AWS::DynamoDB::Table":
			if err := createTable(ctx, ddb, name, r.props); err != nil {
				return nil, fmt.Errorf("table %s: %w", r.id, err)
			}
			refs[r.id] = name
		case "AWS::SQS::Queue":
			url, arn, err := createQueue(ctx, sqsClient, name, r.props, arns)
			if err != nil {
				return nil, fmt.Errorf("queue %s: %w", r.id, err)
			}
			refs[r.id], arns[r.id] = url, arn
		case "AWS::S3::Bucket":
			name = strings.ToLower(name)
			if err := createBucket(ctx, s3Client, name); err != nil {
				return nil, fmt.Errorf("bucket %s: %w", r.id, err)
			}
			refs[r.id] = name
		}
	}

	env := map[string]string{
		"AWS_REGION":                Region,
		"AWS_ENDPOINT_URL_DYNAMODB": ep.DynamoDB,
		"AWS_ENDPOINT_URL_SQS":      ep.SQS,
		"AWS_ENDPOINT_URL_S3":       ep.S3,
	}
	if v := mapValue(mapValue(mapValue(mapValue(root, "Globals"), "Function"), "Environment"), "Variables"); v != nil {
		for i := 0; i+1 < len(v.Content); i += 2 {
			val := v.Content[i+1]
			if val.Tag == "!Ref" {
				resolved, ok := refs[val.Value]
				if !ok {
					return nil, fmt.Errorf("Globals variable %s refers to %s, which the local stack does not create", v.Content[i].Value, val.Value)
				}
				env[v.Content[i].Value] = resolved
			} else {
				env[v.Content[i].Value] = val.Value
			}
		}
	}
	return env, nil
}

func createTable(ctx context.Context, c *dynamodb.Client, name string, p *yaml.Node) error {
	if _, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}); err == nil {
		return nil
	}
	in := &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: ddbtypes.BillingModePayPerRequest}
	for _, a := range seq(mapValue(p, "AttributeDefinitions")) {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{
			AttributeName: aws.String(scalar(mapValue(a, "AttributeName"))),
			AttributeType: ddbtypes.ScalarAttributeType(scalar(mapValue(a, "AttributeType"))),
		})
	}
	in.KeySchema = keySchema(mapValue(p, "KeySchema"))
	for _, g := range seq(mapValue(p, "GlobalSecondaryIndexes")) {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, ddbtypes.GlobalSecondaryIndex{
			IndexName:  aws.String(scalar(mapValue(g, "IndexName"))),
			KeySchema:  keySchema(mapValue(g, "KeySchema")),
			Projection: &ddbtypes.Projection{ProjectionType: ddbtypes.ProjectionType(scalar(mapValue(mapValue(g, "Projection"), "ProjectionType")))},
		})
	}
	if _, err := c.CreateTable(ctx, in); err != nil {
		var inUse *ddbtypes.ResourceInUseException
		if errors.As(err, &inUse) {
			return nil
		}
		return err
	}
	if ttl := mapValue(p, "TimeToLiveSpecification"); ttl != nil {
		_, err := c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String(name),
			TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{AttributeName: aws.String(scalar(mapValue(ttl, "AttributeName"))), Enabled: aws.Bool(true)}})
		if err != nil {
			return fmt.Errorf("time to live: %w", err)
		}
	}
	return nil
}

func keySchema(n *yaml.Node) []ddbtypes.KeySchemaElement {
	var out []ddbtypes.KeySchemaElement
	for _, k := range seq(n) {
		out = append(out, ddbtypes.KeySchemaElement{
			AttributeName: aws.String(scalar(mapValue(k, "AttributeName"))),
			KeyType:       ddbtypes.KeyType(scalar(mapValue(k, "KeyType"))),
		})
	}
	return out
}

func createQueue(ctx context.Context, c *sqs.Client, name string, p *yaml.Node, arns map[string]string) (url, arn string, err error) {
	attrs := map[string]string{}
	for _, k := range []string{"VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds"} {
		if v := mapValue(p, k); v != nil {
			attrs[k] = v.Value
		}
	}
	if rp := mapValue(p, "RedrivePolicy"); rp != nil {
		target := mapValue(rp, "deadLetterTargetArn")
		dlq := strings.TrimSuffix(target.Value, ".Arn")
		max, _ := strconv.Atoi(scalar(mapValue(rp, "maxReceiveCount")))
		b, _ := json.Marshal(map[string]any{"deadLetterTargetArn": arns[dlq], "maxReceiveCount": max})
		attrs["RedrivePolicy"] = string(b)
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", "", err
	}
	got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", "", err
	}
	return aws.ToString(out.QueueUrl), got.Attributes["QueueArn"], nil
}

func createBucket(ctx context.Context, c *s3.Client, name string) error {
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)}); err == nil {
		return nil
	}
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return err
}

// mapValue returns the value under key in a YAML mapping node, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func seq(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func scalar(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	return n.Value
}
