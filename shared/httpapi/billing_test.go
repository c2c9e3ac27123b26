package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"avatarsvc/scripts/localstack"
)

// TestSimultaneousEndsSpendHeadroomOnce ends 20 sessions of one account at
// the same moment while only 5 included minutes are left: exactly 5 are
// drawn from included minutes and 15 from purchased ones, never more, and
// the concurrency counter returns to 0.
func TestSimultaneousEndsSpendHeadroomOnce(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	acct := newAccount(t, "pro") // 3,000 included minutes, 20 concurrent sessions
	u, err := stack.App.Store.GetUser(ctx, acct.User.ID)
	if err != nil {
		t.Fatal(err)
	}
	setIncludedUsed(t, acct.User.ID, u.CurrentPeriod(stack.Clock.Now()).Key(), 2995)
	// Each start reserves the plan's 180-minute session cap: 20 sessions
	// need 3,600 minutes, 5 included and 3,595 purchased.
	if _, err := stack.App.Accounts.AddMinutes(ctx, acct.User.ID, 3595); err != nil {
		t.Fatal(err)
	}
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i], _ = createSession(t, acct.LiveKey)
		if res := call(t, "PUT", "/v1/sessions/"+ids[i]+"/start", acct.LiveKey, nil); res.Status != http.StatusOK {
			t.Fatalf("start %d: %d %s", i, res.Status, res.Body)
		}
		serve(t, ids[i])
	}
	stack.Clock.Advance(30 * time.Second) // each session bills 1 minute

	var wg sync.WaitGroup
	results := make([]response, n)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = call(t, "POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil)
		}()
	}
	wg.Wait()

	plan, charged := 0, 0
	for i, res := range results {
		if res.Status != http.StatusOK {
			t.Fatalf("end %d: %d %s", i, res.Status, res.Body)
		}
		b := dig(res.JSON(t), "session", "billing")
		if dig(b, "minutes_consumed") != 1.0 {
			t.Errorf("session %d billing: got %v, want 1 minute", i, b)
		}
		switch dig(b, "minutes_source") {
		case "plan_minutes":
			plan++
		case "purchased_minutes":
			charged++
		default:
			t.Errorf("session %d billing: got %v", i, b)
		}
	}
	if plan != 5 || charged != 15 {
		t.Errorf("sessions billed from plan / purchased: got %d / %d, want 5 / 15", plan, charged)
	}
	after, err := stack.App.Store.GetUser(ctx, acct.User.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.IncludedUsed != 3000 || after.PurchasedRemaining != 3580 || after.ActiveSessions != 0 || after.ReservedMinutes != 0 {
		t.Errorf("account: included used %d, purchased remaining %d, active %d, reserved %d; want 3000, 3580, 0, 0",
			after.IncludedUsed, after.PurchasedRemaining, after.ActiveSessions, after.ReservedMinutes)
	}
}

// setIncludedUsed puts an account's included-minute counter where a test
// needs it (an admin correction; no API sets it).
func setIncludedUsed(t *testing.T, userID, periodKey string, used int) {
	t.Helper()
	ctx := context.Background()
	ddb := dynamodb.NewFromConfig(localstack.AWSConfig(ctx, stack.Env["AWS_ENDPOINT_URL_DYNAMODB"]))
	_, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(stack.Env["USERS_TABLE"]),
		Key:              map[string]ddbtypes.AttributeValue{"user_id": &ddbtypes.AttributeValueMemberS{Value: userID}},
		UpdateExpression: aws.String("SET usage_period = :p, included_used = :u"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":p": &ddbtypes.AttributeValueMemberS{Value: periodKey},
			":u": &ddbtypes.AttributeValueMemberN{Value: itoa(used)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return fmt.Sprint(n) }
