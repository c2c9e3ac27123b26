package store

import (
	"context"
	"errors"
	"sort"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type keyItem struct {
	KeyHash   string `dynamo:"key_hash,hash"`
	UserID    string `dynamo:"user_id"`
	Mode      string `dynamo:"mode"`
	Prefix    string `dynamo:"prefix"`
	Name      string `dynamo:"name,omitempty"`
	Active    bool   `dynamo:"active"`
	CreatedAt string `dynamo:"created_at"`
}

func (it keyItem) domain() domain.APIKey {
	return domain.APIKey{Hash: it.KeyHash, UserID: it.UserID, Mode: it.Mode, Prefix: it.Prefix,
		Name: it.Name, Active: it.Active, CreatedAt: parseTime(it.CreatedAt)}
}

var errKeyNotFound = domain.Errorf(domain.NotFound, "API key not found")

// PutKey stores a new API key record.
func (s *Store) PutKey(ctx context.Context, k domain.APIKey) error {
	it := keyItem{KeyHash: k.Hash, UserID: k.UserID, Mode: k.Mode, Prefix: k.Prefix, Name: k.Name,
		Active: k.Active, CreatedAt: formatTime(k.CreatedAt)}
	if err := s.keys.Put(it).If("attribute_not_exists($)", "key_hash").Run(ctx); err != nil {
		return unavailable(err, "put key")
	}
	return nil
}

// KeyByHash finds a key by its hash. Consistent, so a deleted or deactivated
// key fails on the very next request.
func (s *Store) KeyByHash(ctx context.Context, hash string) (domain.APIKey, error) {
	var it keyItem
	err := s.keys.Get("key_hash", hash).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return domain.APIKey{}, errKeyNotFound
	}
	if err != nil {
		return domain.APIKey{}, unavailable(err, "get key")
	}
	return it.domain(), nil
}

// ListKeys returns an account's keys, newest first.
func (s *Store) ListKeys(ctx context.Context, userID string) ([]domain.APIKey, error) {
	var items []keyItem
	if err := s.keys.Get("user_id", userID).Index("by-user").Order(dynamo.Descending).All(ctx, &items); err != nil {
		return nil, unavailable(err, "list keys")
	}
	out := make([]domain.APIKey, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// SetKeyActive activates or deactivates a key.
func (s *Store) SetKeyActive(ctx context.Context, hash string, active bool) error {
	err := s.keys.Update("key_hash", hash).Set("active", active).If("attribute_exists($)", "key_hash").Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return errKeyNotFound
	}
	if err != nil {
		return unavailable(err, "set key active")
	}
	return nil
}

// DeleteKey removes a key: it stops working at once.
func (s *Store) DeleteKey(ctx context.Context, hash string) error {
	err := s.keys.Delete("key_hash", hash).If("attribute_exists($)", "key_hash").Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return errKeyNotFound
	}
	if err != nil {
		return unavailable(err, "delete key")
	}
	return nil
}
