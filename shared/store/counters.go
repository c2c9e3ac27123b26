package store

import (
	"context"
	"strconv"
)

type sequenceItem struct {
	Name  string `dynamo:"name,hash"`
	Value int64  `dynamo:"value"`
}

// nextNumber allocates the next integer id of a sequence with one atomic
// ADD: two callers never get the same number.
func (s *Store) nextNumber(ctx context.Context, name string) (int64, error) {
	var it sequenceItem
	if err := s.counters.Update("name", name).Add("value", 1).Value(ctx, &it); err != nil {
		return 0, unavailable(err, "allocate "+name+" number")
	}
	return it.Value, nil
}

// aliasKey is the hash key of the item that maps an integer id to the
// primary id, stored in the same table (without user_id, so the by-user
// index never sees it). Reading it is a consistent key lookup, unlike a GSI.
func aliasKey(n int64) string { return "n:" + strconv.FormatInt(n, 10) }
