package localstack_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"avatarsvc/scripts/localstack"
)

func repoTemplate(t *testing.T) string {
	t.Helper()
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "template.yaml")
}

func writeTemplate(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantTable is a table as the data model needs it, written out here rather
// than read from template.yaml so the test catches a template that drifts.
type wantTable struct {
	logicalID string
	hash      string
	byUser    bool // GSI by-user: HASH user_id, RANGE created_at
	extraGSIs []string
	ttl       string // time-to-live attribute, "" for none
}

var wantTables = []wantTable{
	{logicalID: "UsersTable", hash: "user_id"},
	{logicalID: "ApiKeysTable", hash: "key_hash", byUser: true},
	{logicalID: "SessionsTable", hash: "session_id", byUser: true, ttl: "ttl",
		extraGSIs: []string{"running-by-user: HASH running_user, RANGE started_at ALL", "running: HASH running, RANGE started_at ALL"}},
	{logicalID: "RateLimitsTable", hash: "bucket", ttl: "ttl"},
	{logicalID: "AvatarsTable", hash: "avatar_id", byUser: true},
	{logicalID: "AgentsTable", hash: "agent_id", byUser: true, ttl: "ttl"},
	{logicalID: "LinksTable", hash: "link_id", byUser: true, ttl: "ttl"},
	{logicalID: "CountersTable", hash: "name"},
	{logicalID: "WebhooksTable", hash: "webhook_id", byUser: true},
	{logicalID: "WebhookDeliveriesTable", hash: "delivery_id", ttl: "ttl",
		extraGSIs: []string{"by-webhook: HASH webhook_id, RANGE delivery_id ALL"}},
}

func keyString(ks []ddbtypes.KeySchemaElement) string {
	var parts []string
	for _, k := range ks {
		parts = append(parts, string(k.KeyType)+" "+aws.ToString(k.AttributeName))
	}
	return strings.Join(parts, ", ")
}

func TestCreateFromTemplate(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ep := localstack.Endpoints{
		DynamoDB: localstack.DynamoDBT(t).Endpoint,
		SQS:      localstack.SQST(t).Endpoint,
		S3:       localstack.S3T(t).Endpoint,
	}
	ddb := dynamodb.NewFromConfig(localstack.AWSConfig(ctx, ep.DynamoDB))
	queues := sqs.NewFromConfig(localstack.AWSConfig(ctx, ep.SQS))
	buckets := localstack.S3Client(localstack.AWSConfig(ctx, ep.S3))

	refs, err := localstack.CreateFromTemplate(ctx, ep, repoTemplate(t), localstack.PrefixNames("t"))
	if err != nil {
		t.Fatalf("CreateFromTemplate: %v", err)
	}

	for _, want := range wantTables {
		t.Run(want.logicalID, func(t *testing.T) {
			name := refs[want.logicalID]
			if got, wantName := name, "t-"+want.logicalID; got != wantName {
				t.Fatalf("table name: got %q, want %q", got, wantName)
			}
			desc, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
			if err != nil {
				t.Fatalf("DescribeTable: %v", err)
			}
			if got, wantKey := keyString(desc.Table.KeySchema), "HASH "+want.hash; got != wantKey {
				t.Errorf("key schema: got %q, want %q", got, wantKey)
			}
			if desc.Table.BillingModeSummary == nil || desc.Table.BillingModeSummary.BillingMode != ddbtypes.BillingModePayPerRequest {
				t.Errorf("billing mode: got %+v, want PAY_PER_REQUEST", desc.Table.BillingModeSummary)
			}
			var gsis []string
			for _, g := range desc.Table.GlobalSecondaryIndexes {
				gsis = append(gsis, aws.ToString(g.IndexName)+": "+keyString(g.KeySchema)+" "+string(g.Projection.ProjectionType))
			}
			var wantGSIs []string
			if want.byUser {
				wantGSIs = []string{"by-user: HASH user_id, RANGE created_at ALL"}
			}
			wantGSIs = append(wantGSIs, want.extraGSIs...)
			slices.Sort(gsis)
			slices.Sort(wantGSIs)
			if !slices.Equal(gsis, wantGSIs) {
				t.Errorf("global secondary indexes: got %q, want %q", gsis, wantGSIs)
			}
			ttl, err := ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
			if err != nil {
				t.Fatalf("DescribeTimeToLive: %v", err)
			}
			gotTTL := ""
			if ttl.TimeToLiveDescription.TimeToLiveStatus == ddbtypes.TimeToLiveStatusEnabled {
				gotTTL = aws.ToString(ttl.TimeToLiveDescription.AttributeName)
			}
			if gotTTL != want.ttl {
				t.Errorf("time to live attribute: got %q, want %q", gotTTL, want.ttl)
			}
		})
	}

	t.Run("SessionStartQueue", func(t *testing.T) {
		attrs, err := queues.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(refs["SessionStartQueue"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("GetQueueAttributes: %v", err)
		}
		if got, want := attrs.Attributes["VisibilityTimeout"], "60"; got != want {
			t.Errorf("VisibilityTimeout: got %q, want %q", got, want)
		}
		dlq, err := queues.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(refs["SessionStartDLQ"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
		})
		if err != nil {
			t.Fatalf("GetQueueAttributes DLQ: %v", err)
		}
		var redrive struct {
			DeadLetterTargetArn string
			MaxReceiveCount     json.Number
		}
		if err := json.Unmarshal([]byte(attrs.Attributes["RedrivePolicy"]), &redrive); err != nil {
			t.Fatalf("RedrivePolicy %q: %v", attrs.Attributes["RedrivePolicy"], err)
		}
		if got, want := redrive.DeadLetterTargetArn, dlq.Attributes["QueueArn"]; got != want || got == "" {
			t.Errorf("dead-letter target: got %q, want %q", got, want)
		}
		if got, want := redrive.MaxReceiveCount.String(), "5"; got != want {
			t.Errorf("maxReceiveCount: got %s, want %s", got, want)
		}
	})

	t.Run("MediaBucket", func(t *testing.T) {
		if got, want := refs["MediaBucket"], "t-mediabucket"; got != want {
			t.Fatalf("bucket name: got %q, want %q", got, want)
		}
		if _, err := buckets.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(refs["MediaBucket"])}); err != nil {
			t.Errorf("HeadBucket: %v", err)
		}
	})

	t.Run("second call keeps resources and data", func(t *testing.T) {
		_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(refs["UsersTable"]),
			Item:      map[string]ddbtypes.AttributeValue{"user_id": &ddbtypes.AttributeValueMemberS{Value: "u1"}},
		})
		if err != nil {
			t.Fatalf("PutItem: %v", err)
		}
		if _, err := queues.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(refs["SessionStartQueue"]), MessageBody: aws.String("job")}); err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
		_, err = buckets.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(refs["MediaBucket"]), Key: aws.String("k"), Body: strings.NewReader("v")})
		if err != nil {
			t.Fatalf("PutObject: %v", err)
		}

		again, err := localstack.CreateFromTemplate(ctx, ep, repoTemplate(t), localstack.PrefixNames("t"))
		if err != nil {
			t.Fatalf("second CreateFromTemplate: %v", err)
		}
		for id, ref := range refs {
			if again[id] != ref {
				t.Errorf("%s: got %q on the second call, want %q", id, again[id], ref)
			}
		}
		item, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(refs["UsersTable"]),
			Key:       map[string]ddbtypes.AttributeValue{"user_id": &ddbtypes.AttributeValueMemberS{Value: "u1"}},
		})
		if err != nil || item.Item == nil {
			t.Errorf("user after second call: got %v (err %v), want the item", item, err)
		}
		msgs, err := queues.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(refs["SessionStartQueue"]), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil || len(msgs.Messages) != 1 {
			t.Errorf("queued jobs after second call: got %d (err %v), want 1", len(msgs.Messages), err)
		}
		if _, err := buckets.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(refs["MediaBucket"]), Key: aws.String("k")}); err != nil {
			t.Errorf("object after second call: %v", err)
		}
	})

	t.Run("CreateStack environment", func(t *testing.T) {
		env, err := localstack.CreateStack(ctx, repoTemplate(t), ep, "t", map[string]string{
			"MEDIA_BASE_URL": "http://127.0.0.1:1/media", "LINK_PAGE_URL": "http://127.0.0.1:1/link/",
		})
		if err != nil {
			t.Fatalf("CreateStack: %v", err)
		}
		tests := map[string]string{
			"USERS_TABLE":               refs["UsersTable"],
			"SESSIONS_TABLE":            refs["SessionsTable"],
			"MEDIA_BUCKET":              refs["MediaBucket"],
			"MEDIA_BASE_URL":            "http://127.0.0.1:1/media",
			"AWS_REGION":                localstack.Region,
			"AWS_ENDPOINT_URL_DYNAMODB": ep.DynamoDB,
			"AWS_ENDPOINT_URL_SQS":      ep.SQS,
			"AWS_ENDPOINT_URL_S3":       ep.S3,
		}
		for key, want := range tests {
			if got := env[key]; got != want {
				t.Errorf("%s: got %q, want %q", key, got, want)
			}
		}
		queueVars := 0
		for _, v := range env {
			if v == refs["SessionStartQueue"] {
				queueVars++
			}
		}
		if queueVars != 1 {
			t.Errorf("variables holding the session-start queue URL: got %d, want 1", queueVars)
		}
	})

	t.Run("long-form intrinsics and fifo", func(t *testing.T) {
		path := writeTemplate(t, `
Resources:
  Jobs:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
      RedrivePolicy:
        deadLetterTargetArn: {"Fn::GetAtt": [Dead, Arn]}
        maxReceiveCount: 3
  Dead:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
  Other:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt [Plain, Arn]
        maxReceiveCount: 2
  Plain:
    Type: AWS::SQS::Queue
  Fn:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: .}
`)
		got, err := localstack.CreateFromTemplate(ctx, ep, path, localstack.PrefixNames("lf"))
		if err != nil {
			t.Fatalf("CreateFromTemplate: %v", err)
		}
		if !strings.HasSuffix(got["Jobs"], "/lf-Jobs.fifo") {
			t.Errorf("fifo queue url: got %q, want it to end in /lf-Jobs.fifo", got["Jobs"])
		}
		if _, ok := got["Fn"]; ok {
			t.Errorf("function got a local resource: %q", got["Fn"])
		}
		attrs, err := queues.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(got["Other"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameRedrivePolicy},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(attrs.Attributes["RedrivePolicy"], ":lf-Plain") {
			t.Errorf("RedrivePolicy: got %q, want it to name lf-Plain", attrs.Attributes["RedrivePolicy"])
		}
	})

	t.Run("dead-letter target outside the template", func(t *testing.T) {
		path := writeTemplate(t, `
Resources:
  Jobs:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt Missing.Arn
        maxReceiveCount: 3
`)
		if _, err := localstack.CreateFromTemplate(ctx, ep, path, nil); err == nil {
			t.Error("got no error, want one naming the queue")
		}
	})
}

func TestFunctionEnvironment(t *testing.T) {
	path := writeTemplate(t, `
Parameters:
  Stage: {Type: String, Default: dev}
  Secret: {Type: String, NoEcho: true}
Globals:
  Function:
    Environment:
      Variables:
        TABLE: !Ref Things
        LONG_TABLE: {Ref: Things}
        STAGE: !Ref Stage
        SECRET: !Ref Secret
        ARN_PREFIX: !Sub "arn:aws:sqs:${AWS::Region}:${Stage}"
        PLAIN: hello
        NUMBER: 42
Resources:
  Things: {Type: AWS::DynamoDB::Table}
`)
	tmpl, err := localstack.ReadTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	env, err := tmpl.FunctionEnvironment(map[string]string{"Things": "p-Things"}, map[string]string{"Secret": "s3cr3t"})
	if err != nil {
		t.Fatalf("FunctionEnvironment: %v", err)
	}
	want := map[string]string{
		"TABLE":      "p-Things",
		"LONG_TABLE": "p-Things",
		"STAGE":      "dev",
		"SECRET":     "s3cr3t",
		"ARN_PREFIX": "arn:aws:sqs:us-east-1:dev",
		"PLAIN":      "hello",
		"NUMBER":     "42",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s: got %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("variables: got %d, want %d (%v)", len(env), len(want), env)
	}

	if _, err := tmpl.FunctionEnvironment(nil, nil); err == nil {
		t.Error("unresolvable !Ref Things and !Ref Secret: got no error, want one")
	}
}
