package localstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
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

// Template is a parsed CloudFormation/SAM template. It is read as a YAML
// node tree, so short intrinsic tags (!Ref, !Sub, !GetAtt) parse like any
// other value and are interpreted only where the local stack needs them.
type Template struct {
	root *yaml.Node
}

// ReadTemplate parses the template at path.
func ReadTemplate(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("localstack: parse %s: %w", path, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("localstack: %s is not a YAML mapping", path)
	}
	return &Template{root: doc.Content[0]}, nil
}

// Resource is one entry of the template's Resources section.
type Resource struct {
	LogicalID  string
	Type       string
	properties *yaml.Node
}

// Resources lists the template's resources in file order.
func (t *Template) Resources() []Resource {
	n := MapValue(t.root, "Resources")
	var out []Resource
	for i := 0; n != nil && i+1 < len(n.Content); i += 2 {
		r := n.Content[i+1]
		out = append(out, Resource{LogicalID: n.Content[i].Value, Type: scalar(MapValue(r, "Type")), properties: MapValue(r, "Properties")})
	}
	return out
}

// Names maps a logical id to the physical name a resource gets locally.
type Names func(logicalID string) string

// PrefixNames names every resource prefix-LogicalId; buckets are lowercased
// by CreateFromTemplate because S3 requires it.
func PrefixNames(prefix string) Names {
	return func(logicalID string) string { return prefix + "-" + logicalID }
}

// CreateFromTemplate creates every AWS::DynamoDB::Table (attributes, key
// schema, global secondary indexes, on-demand billing, time to live),
// AWS::SQS::Queue (attributes and the dead-letter redrive) and AWS::S3::Bucket
// that the template at templatePath declares, on the local endpoints.
// Existing resources are kept with their data, so a restarted `make run`
// finds it again. Other resource types are ignored.
//
// It returns, by logical id, what !Ref yields in CloudFormation: the table
// name, the queue URL, the bucket name. names may be nil: resources are then
// named by their logical id.
func CreateFromTemplate(ctx context.Context, ep Endpoints, templatePath string, names Names) (map[string]string, error) {
	tmpl, err := ReadTemplate(templatePath)
	if err != nil {
		return nil, err
	}
	if names == nil {
		names = func(id string) string { return id }
	}
	ddb := dynamodb.NewFromConfig(AWSConfig(ctx, ep.DynamoDB))
	queues := sqs.NewFromConfig(AWSConfig(ctx, ep.SQS))
	buckets := S3Client(AWSConfig(ctx, ep.S3))

	refs := map[string]string{}
	queueARNs := map[string]string{}
	var pendingQueues []Resource
	for _, r := range tmpl.Resources() {
		switch r.Type {
		case "AWS::DynamoDB::Table":
			name := names(r.LogicalID)
			if err := createTable(ctx, ddb, name, r.properties); err != nil {
				return nil, fmt.Errorf("localstack: table %s: %w", r.LogicalID, err)
			}
			refs[r.LogicalID] = name
		case "AWS::S3::Bucket":
			name := strings.ToLower(names(r.LogicalID))
			if err := createBucket(ctx, buckets, name); err != nil {
				return nil, fmt.Errorf("localstack: bucket %s: %w", r.LogicalID, err)
			}
			refs[r.LogicalID] = name
		case "AWS::SQS::Queue":
			pendingQueues = append(pendingQueues, r)
		}
	}
	// A redrive policy names its dead-letter queue's ARN, so each queue waits
	// until the queue it points at exists.
	for len(pendingQueues) > 0 {
		var next []Resource
		for _, r := range pendingQueues {
			dlq, err := deadLetterTarget(r.properties)
			if err != nil {
				return nil, fmt.Errorf("localstack: queue %s: %w", r.LogicalID, err)
			}
			if dlq != "" && queueARNs[dlq] == "" {
				next = append(next, r)
				continue
			}
			url, arn, err := createQueue(ctx, queues, names(r.LogicalID), r.properties, queueARNs[dlq])
			if err != nil {
				return nil, fmt.Errorf("localstack: queue %s: %w", r.LogicalID, err)
			}
			refs[r.LogicalID], queueARNs[r.LogicalID] = url, arn
		}
		if len(next) == len(pendingQueues) {
			return nil, fmt.Errorf("localstack: queue %s has a dead-letter target that is not a queue of this template", next[0].LogicalID)
		}
		pendingQueues = next
	}
	return refs, nil
}

var subRef = regexp.MustCompile(`\$\{([A-Za-z0-9:]+)\}`)

// FunctionEnvironment returns Globals.Function.Environment.Variables with
// intrinsics resolved: !Ref and ${X} in !Sub take refs (as CreateFromTemplate
// returns them), then params, then a parameter's Default; AWS::Region is
// Region. A value that cannot be resolved is an error, so the local stack
// never runs with a variable AWS would have set.
// Variables in given are not resolved: their given values are used.
func (t *Template) FunctionEnvironment(refs, params map[string]string, given ...map[string]string) (map[string]string, error) {
	resolve := func(name string) (string, bool) {
		if v, ok := refs[name]; ok {
			return v, true
		}
		if v, ok := params[name]; ok {
			return v, true
		}
		if d := MapValue(MapValue(MapValue(t.root, "Parameters"), name), "Default"); d != nil {
			return d.Value, true
		}
		if name == "AWS::Region" {
			return Region, true
		}
		return "", false
	}
	env := map[string]string{}
	vars := MapValue(MapValue(MapValue(MapValue(t.root, "Globals"), "Function"), "Environment"), "Variables")
	for i := 0; vars != nil && i+1 < len(vars.Content); i += 2 {
		key, val := vars.Content[i].Value, vars.Content[i+1]
		if v, ok := lookupGiven(given, key); ok {
			env[key] = v
			continue
		}
		switch {
		case val.Tag == "!Ref" || MapValue(val, "Ref") != nil:
			name := val.Value
			if val.Tag != "!Ref" {
				name = MapValue(val, "Ref").Value
			}
			v, ok := resolve(name)
			if !ok {
				return nil, fmt.Errorf("localstack: environment variable %s refers to %s, which is neither a local resource nor a parameter", key, name)
			}
			env[key] = v
		case val.Tag == "!Sub" || MapValue(val, "Fn::Sub") != nil:
			text := val.Value
			if val.Tag != "!Sub" {
				text = MapValue(val, "Fn::Sub").Value
			}
			var missing []string
			env[key] = subRef.ReplaceAllStringFunc(text, func(m string) string {
				v, ok := resolve(m[2 : len(m)-1])
				if !ok {
					missing = append(missing, m)
				}
				return v
			})
			if len(missing) > 0 {
				return nil, fmt.Errorf("localstack: environment variable %s: cannot resolve %s", key, strings.Join(missing, ", "))
			}
		case val.Kind == yaml.ScalarNode:
			env[key] = val.Value
		default:
			return nil, fmt.Errorf("localstack: environment variable %s uses an intrinsic the local stack does not resolve", key)
		}
	}
	return env, nil
}

func lookupGiven(given []map[string]string, key string) (string, bool) {
	for _, g := range given {
		if v, ok := g[key]; ok {
			return v, true
		}
	}
	return "", false
}

func createTable(ctx context.Context, c *dynamodb.Client, name string, p *yaml.Node) error {
	if _, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}); err == nil {
		return nil
	} else if !isNotFound(err) {
		return err
	}
	in := &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: ddbtypes.BillingModePayPerRequest}
	for _, a := range seq(MapValue(p, "AttributeDefinitions")) {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{
			AttributeName: aws.String(scalar(MapValue(a, "AttributeName"))),
			AttributeType: ddbtypes.ScalarAttributeType(scalar(MapValue(a, "AttributeType"))),
		})
	}
	in.KeySchema = keySchema(MapValue(p, "KeySchema"))
	for _, g := range seq(MapValue(p, "GlobalSecondaryIndexes")) {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, ddbtypes.GlobalSecondaryIndex{
			IndexName:  aws.String(scalar(MapValue(g, "IndexName"))),
			KeySchema:  keySchema(MapValue(g, "KeySchema")),
			Projection: projection(MapValue(g, "Projection")),
		})
	}
	for _, l := range seq(MapValue(p, "LocalSecondaryIndexes")) {
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, ddbtypes.LocalSecondaryIndex{
			IndexName:  aws.String(scalar(MapValue(l, "IndexName"))),
			KeySchema:  keySchema(MapValue(l, "KeySchema")),
			Projection: projection(MapValue(l, "Projection")),
		})
	}
	if _, err := c.CreateTable(ctx, in); err != nil {
		var inUse *ddbtypes.ResourceInUseException
		if errors.As(err, &inUse) {
			return nil // created by a concurrent caller
		}
		return err
	}
	if ttl := MapValue(p, "TimeToLiveSpecification"); ttl != nil && scalar(MapValue(ttl, "Enabled")) == "true" {
		_, err := c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: aws.String(name),
			TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
				AttributeName: aws.String(scalar(MapValue(ttl, "AttributeName"))),
				Enabled:       aws.Bool(true),
			},
		})
		if err != nil {
			return fmt.Errorf("time to live: %w", err)
		}
	}
	return nil
}

func isNotFound(err error) bool {
	var notFound *ddbtypes.ResourceNotFoundException
	return errors.As(err, &notFound)
}

func keySchema(n *yaml.Node) []ddbtypes.KeySchemaElement {
	var out []ddbtypes.KeySchemaElement
	for _, k := range seq(n) {
		out = append(out, ddbtypes.KeySchemaElement{
			AttributeName: aws.String(scalar(MapValue(k, "AttributeName"))),
			KeyType:       ddbtypes.KeyType(scalar(MapValue(k, "KeyType"))),
		})
	}
	return out
}

func projection(n *yaml.Node) *ddbtypes.Projection {
	p := &ddbtypes.Projection{ProjectionType: ddbtypes.ProjectionType(scalar(MapValue(n, "ProjectionType")))}
	if p.ProjectionType == "" {
		p.ProjectionType = ddbtypes.ProjectionTypeAll
	}
	for _, a := range seq(MapValue(n, "NonKeyAttributes")) {
		p.NonKeyAttributes = append(p.NonKeyAttributes, a.Value)
	}
	return p
}

// queueAttributes are the queue properties that are plain SQS attributes.
var queueAttributes = []string{
	"VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds",
	"MaximumMessageSize", "FifoQueue", "ContentBasedDeduplication",
}

// deadLetterTarget returns the logical id RedrivePolicy.deadLetterTargetArn
// points at (!GetAtt X.Arn, !GetAtt [X, Arn] or Fn::GetAtt), or "" when the
// queue has no redrive policy.
func deadLetterTarget(p *yaml.Node) (string, error) {
	target := MapValue(MapValue(p, "RedrivePolicy"), "deadLetterTargetArn")
	if target == nil {
		return "", nil
	}
	if long := MapValue(target, "Fn::GetAtt"); long != nil {
		target = long
	} else if target.Tag != "!GetAtt" {
		return "", fmt.Errorf("deadLetterTargetArn must be !GetAtt Queue.Arn")
	}
	switch target.Kind {
	case yaml.ScalarNode:
		id, attr, _ := strings.Cut(target.Value, ".")
		if attr == "Arn" {
			return id, nil
		}
	case yaml.SequenceNode:
		if len(target.Content) == 2 && target.Content[1].Value == "Arn" {
			return target.Content[0].Value, nil
		}
	}
	return "", fmt.Errorf("deadLetterTargetArn must name a queue's Arn")
}

func createQueue(ctx context.Context, c *sqs.Client, name string, p *yaml.Node, dlqARN string) (url, arn string, err error) {
	existing, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err == nil {
		url = aws.ToString(existing.QueueUrl)
	} else {
		var missing *sqstypes.QueueDoesNotExist
		if !errors.As(err, &missing) {
			return "", "", err
		}
		attrs := map[string]string{}
		for _, k := range queueAttributes {
			if v := MapValue(p, k); v != nil {
				attrs[k] = v.Value
			}
		}
		if dlqARN != "" {
			maxReceive, err := strconv.Atoi(scalar(MapValue(MapValue(p, "RedrivePolicy"), "maxReceiveCount")))
			if err != nil {
				return "", "", fmt.Errorf("RedrivePolicy.maxReceiveCount: %w", err)
			}
			policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlqARN, "maxReceiveCount": maxReceive})
			attrs["RedrivePolicy"] = string(policy)
		}
		if attrs["FifoQueue"] == "true" && !strings.HasSuffix(name, ".fifo") {
			name += ".fifo"
		}
		created, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			return "", "", err
		}
		url = aws.ToString(created.QueueUrl)
	}
	got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", err
	}
	return url, got.Attributes["QueueArn"], nil
}

func createBucket(ctx context.Context, c *s3.Client, name string) error {
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)}); err == nil {
		return nil
	}
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return err
}

// MapValue returns the value under key in a YAML mapping node, or nil.
func MapValue(n *yaml.Node, key string) *yaml.Node {
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
