package store

import (
	"context"
	"errors"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type avatarItem struct {
	AvatarID   string `dynamo:"avatar_id,hash"`
	Number     int64  `dynamo:"number,omitempty"`
	UserID     string `dynamo:"user_id,omitempty"`
	Name       string `dynamo:"name,omitempty"`
	URL        string `dynamo:"url,omitempty"`
	VoiceID    string `dynamo:"voice_id,omitempty"`
	StorageKey string `dynamo:"storage_key,omitempty"`
	MediaType  string `dynamo:"media_type,omitempty"`
	IsFavorite bool   `dynamo:"is_favorite,omitempty"`
	CreatedAt  string `dynamo:"created_at,omitempty"`
	UpdatedAt  string `dynamo:"updated_at,omitempty"`
	// Target is set on alias items only: the primary id of integer Number.
	Target string `dynamo:"target,omitempty"`
}

func toAvatarItem(a domain.Avatar) avatarItem {
	return avatarItem{
		AvatarID: a.ID, Number: a.Number, UserID: a.UserID, Name: a.Name, URL: a.URL, VoiceID: a.VoiceID,
		StorageKey: a.StorageKey, MediaType: a.MediaType, IsFavorite: a.IsFavorite,
		CreatedAt: formatTime(a.CreatedAt), UpdatedAt: formatTime(a.UpdatedAt),
	}
}

func (it avatarItem) domain() domain.Avatar {
	return domain.Avatar{
		ID: it.AvatarID, Number: it.Number, UserID: it.UserID, Name: it.Name, URL: it.URL, VoiceID: it.VoiceID,
		StorageKey: it.StorageKey, MediaType: it.MediaType, IsFavorite: it.IsFavorite,
		CreatedAt: parseTime(it.CreatedAt), UpdatedAt: parseTime(it.UpdatedAt),
	}
}

// AvatarQuota is the plan's avatars-per-cycle rule an upload must pass,
// decided by the caller from a fresh read of the account.
type AvatarQuota struct {
	Period     domain.Period
	SamePeriod bool // the account's counters already belong to Period
	Limit      int  // -1: unlimited (still counted)
}

// NumberAvatar allocates the avatar's integer id.
func (s *Store) NumberAvatar(ctx context.Context) (int64, error) { return s.nextNumber(ctx, "avatar") }

// CreateAvatar stores an avatar, its integer alias and, with a quota, counts
// it against the owner's avatars for the cycle, in one transaction; a full
// quota fails with ErrAccountLimit.
func (s *Store) CreateAvatar(ctx context.Context, a domain.Avatar, q *AvatarQuota) error {
	tx := s.db.WriteTx().
		Put(s.avatars.Put(toAvatarItem(a)).If("attribute_not_exists($)", "avatar_id")).
		Put(s.avatars.Put(avatarItem{AvatarID: aliasKey(a.Number), Number: a.Number, Target: a.ID}).If("attribute_not_exists($)", "avatar_id"))
	if q != nil {
		key := q.Period.Key()
		acct := s.users.Update("user_id", a.UserID)
		if q.SamePeriod {
			acct = acct.Add("avatars_used", 1).If("$ = ?", "usage_period", key)
			if q.Limit >= 0 {
				acct = acct.If("$ < ?", "avatars_used", q.Limit)
			}
		} else {
			// A new cycle: its counters restart (as EndSession restarts them).
			acct = acct.Set("usage_period", key).Set("included_used", 0).Set("avatars_used", 1).
				If("attribute_exists($) AND (attribute_not_exists($) OR $ <> ?)", "user_id", "usage_period", "usage_period", key)
		}
		tx = tx.Update(acct)
	}
	err := s.runTx(ctx, tx)
	if failed, ok := cancelReasons(err); ok {
		if len(failed) > 2 && failed[2] {
			return ErrAccountLimit
		}
		return ErrSessionChanged
	}
	if err != nil {
		return unavailable(err, "create avatar")
	}
	return nil
}

// GetAvatar reads an avatar the user may use: their own or the catalog's.
// Another tenant's avatar is reported exactly like a missing one.
func (s *Store) GetAvatar(ctx context.Context, userID, id string) (domain.Avatar, error) {
	var it avatarItem
	err := s.avatars.Get("avatar_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) || (err == nil && (it.Target != "" || (it.UserID != userID && it.UserID != domain.CatalogOwner))) {
		return domain.Avatar{}, domain.ErrAvatarNotFound
	}
	if err != nil {
		return domain.Avatar{}, unavailable(err, "get avatar")
	}
	return it.domain(), nil
}

// AvatarIDForNumber resolves an integer avatar id to its primary id.
func (s *Store) AvatarIDForNumber(ctx context.Context, n int64) (string, error) {
	var it avatarItem
	err := s.avatars.Get("avatar_id", aliasKey(n)).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return "", domain.ErrAvatarNotFound
	}
	if err != nil {
		return "", unavailable(err, "get avatar alias")
	}
	return it.Target, nil
}

// ListAvatars returns a page of the user's avatars, newest first.
func (s *Store) ListAvatars(ctx context.Context, userID string, page domain.Page) ([]domain.Avatar, string, error) {
	start, err := decodeCursor(page.Cursor, userID, "user_id", "created_at", "avatar_id")
	if err != nil {
		return nil, "", err
	}
	var items []avatarItem
	next, err := s.avatars.Get("user_id", userID).Index(byUserIndex).Order(dynamo.Descending).
		StartFrom(start).Limit(page.Limit).AllWithLastEvaluatedKey(ctx, &items)
	if err != nil {
		return nil, "", unavailable(err, "list avatars")
	}
	out := make([]domain.Avatar, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, encodeCursor(next), nil
}

// AvatarChanges is a partial update; nil fields stay as they are.
type AvatarChanges struct {
	Name       *string
	URL        *string
	VoiceID    *string // "" removes the voice
	IsFavorite *bool
}

// UpdateAvatar applies changes to the user's own avatar.
func (s *Store) UpdateAvatar(ctx context.Context, userID, id string, c AvatarChanges, now time.Time) (domain.Avatar, error) {
	u := s.avatars.Update("avatar_id", id).Set("updated_at", formatTime(now)).
		If("$ = ?", "user_id", userID)
	if c.Name != nil {
		u = u.Set("name", *c.Name)
	}
	if c.URL != nil {
		u = u.Set("url", *c.URL)
	}
	if c.VoiceID != nil {
		if *c.VoiceID == "" {
			u = u.Remove("voice_id")
		} else {
			u = u.Set("voice_id", *c.VoiceID)
		}
	}
	if c.IsFavorite != nil {
		u = u.Set("is_favorite", *c.IsFavorite)
	}
	var it avatarItem
	err := u.Value(ctx, &it)
	if dynamo.IsCondCheckFailed(err) {
		return domain.Avatar{}, domain.ErrAvatarNotFound
	}
	if err != nil {
		return domain.Avatar{}, unavailable(err, "update avatar")
	}
	return it.domain(), nil
}

// DeleteAvatar removes the user's avatar and its integer alias.
func (s *Store) DeleteAvatar(ctx context.Context, a domain.Avatar) error {
	err := s.runTx(ctx, s.db.WriteTx().
		Delete(s.avatars.Delete("avatar_id", a.ID).If("$ = ?", "user_id", a.UserID)).
		Delete(s.avatars.Delete("avatar_id", aliasKey(a.Number))))
	if _, ok := cancelReasons(err); ok {
		return domain.ErrAvatarNotFound
	}
	if err != nil {
		return unavailable(err, "delete avatar")
	}
	return nil
}
