package localstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"avatarsvc/scripts/localstack"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDynamoDBLocal(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := localstack.DynamoDBT(t).Client(ctx)

	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("things"),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: ddbtypes.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String("things"),
		Item: map[string]ddbtypes.AttributeValue{
			"id":   &ddbtypes.AttributeValueMemberS{Value: "a"},
			"size": &ddbtypes.AttributeValueMemberN{Value: "3"},
		},
	})
	if err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	// A conditional put on an existing key must fail the way AWS does.
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String("things"),
		Item:                map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "a"}},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	var conditionFailed *ddbtypes.ConditionalCheckFailedException
	if !errors.As(err, &conditionFailed) {
		t.Errorf("conditional PutItem on existing key: got %v, want ConditionalCheckFailedException", err)
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String("things"),
		Key:            map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "a"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	size, ok := got.Item["size"].(*ddbtypes.AttributeValueMemberN)
	if !ok || size.Value != "3" {
		t.Errorf("size: got %#v, want N 3", got.Item["size"])
	}
}

func TestDynamoDBLocalKeepsDataInDataDir(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dataDir := t.TempDir()
	opts := localstack.Options{LogDir: t.TempDir(), DataDir: dataDir}

	first, err := localstack.StartDynamoDB(ctx, opts)
	if err != nil {
		t.Fatalf("StartDynamoDB: %v", err)
	}
	_, err = first.Client(ctx).CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("kept"),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: ddbtypes.KeyTypeHash}},
	})
	first.Stop()
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}

	second, err := localstack.StartDynamoDB(ctx, opts)
	if err != nil {
		t.Fatalf("restart StartDynamoDB: %v", err)
	}
	defer second.Stop()
	tables, err := second.Client(ctx).ListTables(ctx, &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatalf("ListTables: %v", err)
	}
	if got, want := tables.TableNames, []string{"kept"}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("tables after restart: got %v, want %v", got, want)
	}
}

func TestSQSServer(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	q := localstack.SQST(t).Client(ctx)

	created, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("jobs"),
		Attributes: map[string]string{"VisibilityTimeout": "60"},
	})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	_, err = q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: created.QueueUrl, MessageBody: aws.String(`{"session_id":"s1"}`)})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	got, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: created.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	if len(got.Messages) != 1 {
		t.Fatalf("messages received: got %d, want 1", len(got.Messages))
	}
	if got, want := aws.ToString(got.Messages[0].Body), `{"session_id":"s1"}`; got != want {
		t.Errorf("body: got %q, want %q", got, want)
	}

	// While the message is in flight a second receive sees nothing; making
	// it visible again returns it.
	again, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: created.QueueUrl, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatalf("ReceiveMessage in flight: %v", err)
	}
	if len(again.Messages) != 0 {
		t.Errorf("messages while in flight: got %d, want 0", len(again.Messages))
	}
	_, err = q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: created.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0,
	})
	if err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	redelivered, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: created.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatalf("ReceiveMessage after visibility change: %v", err)
	}
	if len(redelivered.Messages) != 1 {
		t.Fatalf("messages after visibility change: got %d, want 1", len(redelivered.Messages))
	}
	_, err = q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: created.QueueUrl, ReceiptHandle: redelivered.Messages[0].ReceiptHandle})
	if err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       created.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	for _, name := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"} {
		if got := attrs.Attributes[name]; got != "0" {
			t.Errorf("%s after delete: got %q, want 0", name, got)
		}
	}
}

func TestSQSServerRedrivesToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	q := localstack.SQST(t).Client(ctx)

	dlq, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs-dlq")})
	if err != nil {
		t.Fatalf("CreateQueue dlq: %v", err)
	}
	dlqAttrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: dlq.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes dlq: %v", err)
	}
	redrive, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlqAttrs.Attributes["QueueArn"], "maxReceiveCount": "2"})
	main, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("jobs"),
		Attributes: map[string]string{"RedrivePolicy": string(redrive)},
	})
	if err != nil {
		t.Fatalf("CreateQueue with RedrivePolicy: %v", err)
	}
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: main.QueueUrl, MessageBody: aws.String("poison")}); err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	// Each delivery whose visibility timeout runs out without a delete is a
	// failed attempt; after maxReceiveCount of them the message moves to the
	// dead-letter queue. (ChangeMessageVisibility is not used here: this
	// server counts it as a receive, which AWS does not.)
	deliveries := 0
	for i := 0; i < 5 && deliveries < 2; i++ {
		got, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: main.QueueUrl, MaxNumberOfMessages: 1, VisibilityTimeout: 1, WaitTimeSeconds: 3})
		if err != nil {
			t.Fatalf("ReceiveMessage %d: %v", i, err)
		}
		deliveries += len(got.Messages)
	}
	if got, want := deliveries, 2; got != want {
		t.Fatalf("deliveries from the main queue: got %d, want %d", got, want)
	}
	dead, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 3})
	if err != nil {
		t.Fatalf("ReceiveMessage dlq: %v", err)
	}
	if len(dead.Messages) != 1 || aws.ToString(dead.Messages[0].Body) != "poison" {
		t.Errorf("dead-letter queue: got %v, want the poison message", dead.Messages)
	}
	left, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: main.QueueUrl, MaxNumberOfMessages: 1})
	if err != nil {
		t.Fatalf("ReceiveMessage main after redrive: %v", err)
	}
	if len(left.Messages) != 0 {
		t.Errorf("main queue after redrive: got %d messages, want 0", len(left.Messages))
	}
}

func TestS3InProcess(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := localstack.S3T(t).Client(ctx)

	if _, err := s.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("media")}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	body := []byte("\x89PNG fake image bytes")
	_, err := s.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("media"), Key: aws.String("avatars/a1/image.png"),
		Body: bytes.NewReader(body), ContentType: aws.String("image/png"),
	})
	if err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	got, err := s.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("media"), Key: aws.String("avatars/a1/image.png")})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	defer got.Body.Close()
	gotBody, err := io.ReadAll(got.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotBody, body) {
		t.Errorf("body: got %q, want %q", gotBody, body)
	}
	if got, want := aws.ToString(got.ContentType), "image/png"; got != want {
		t.Errorf("content type: got %q, want %q", got, want)
	}
}
