package store

import (
	"encoding/base64"
	"encoding/json"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/guregu/dynamo/v2"
)

// Lists page through a user's items with an opaque cursor: DynamoDB's last
// evaluated key (every key attribute of the by-user indexes is a string),
// as base64url JSON.

func encodeCursor(k dynamo.PagingKey) string {
	if len(k) == 0 {
		return ""
	}
	m := make(map[string]string, len(k))
	for name, v := range k {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return ""
		}
		m[name] = s.Value
	}
	b, _ := json.Marshal(m)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor checks that the cursor names exactly the expected key
// attributes and that it belongs to userID (its user_id attribute; callers
// with another owner attribute pass "" and check it themselves), so a cursor
// cannot be used to read another tenant's items.
func decodeCursor(c, userID string, keys ...string) (dynamo.PagingKey, error) {
	if c == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) > 1024 {
		return nil, errBadCursor
	}
	var m map[string]string
	if json.Unmarshal(b, &m) != nil || len(m) != len(keys) || (userID != "" && m["user_id"] != userID) {
		return nil, errBadCursor
	}
	k := dynamo.PagingKey{}
	for _, name := range keys {
		v, ok := m[name]
		if !ok || v == "" {
			return nil, errBadCursor
		}
		k[name] = &types.AttributeValueMemberS{Value: v}
	}
	return k, nil
}
