package store

import (
	"context"
	"time"
)

type counterItem struct {
	Bucket string `dynamo:"bucket,hash"`
	Count  int    `dynamo:"count"`
	TTL    int64  `dynamo:"ttl"`
}

// Increment adds one to a rate-limit window's counter and returns the new
// count. Counters live in DynamoDB so every Lambda instance shares them; the
// TTL only tidies old windows away (correctness never depends on it).
func (s *Store) Increment(ctx context.Context, bucket string, expires time.Time) (int, error) {
	var it counterItem
	err := s.rateLimits.Update("bucket", bucket).Add("count", 1).SetIfNotExists("ttl", expires.Unix()).
		Value(ctx, &it)
	if err != nil {
		return 0, unavailable(err, "rate limit counter")
	}
	return it.Count, nil
}
