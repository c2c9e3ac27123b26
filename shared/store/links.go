package store

import (
	"context"
	"errors"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type linkItem struct {
	LinkID    string  `dynamo:"link_id,hash"`
	UserID    string  `dynamo:"user_id"`
	Name      *string `dynamo:"name,omitempty"`
	AgentID   string  `dynamo:"agent_id"`
	Status    string  `dynamo:"status"`
	Uses      int     `dynamo:"uses"`
	UseLimit  *int    `dynamo:"use_limit,omitempty"`
	CreatedAt string  `dynamo:"created_at"`
	ExpiresAt string  `dynamo:"expires_at,omitempty"`
	Preview   bool    `dynamo:"preview,omitempty"`
	TTL       int64   `dynamo:"ttl,omitempty"` // previews only: DynamoDB removes them later
}

func toLinkItem(l domain.Link) linkItem {
	it := linkItem{
		LinkID: l.ID, UserID: l.UserID, Name: l.Name, AgentID: l.AgentID, Status: string(l.Status), Uses: l.Uses,
		UseLimit: l.UseLimit, CreatedAt: formatTime(l.CreatedAt), Preview: l.Preview,
	}
	if l.ExpiresAt != nil {
		it.ExpiresAt = formatTime(*l.ExpiresAt)
		if l.Preview {
			it.TTL = ttlOf(*l.ExpiresAt)
		}
	}
	return it
}

func (it linkItem) domain() domain.Link {
	l := domain.Link{
		ID: it.LinkID, UserID: it.UserID, Name: it.Name, AgentID: it.AgentID, Status: domain.LinkStatus(it.Status),
		Uses: it.Uses, UseLimit: it.UseLimit, CreatedAt: parseTime(it.CreatedAt), Preview: it.Preview,
	}
	if it.ExpiresAt != "" {
		t := parseTime(it.ExpiresAt)
		l.ExpiresAt = &t
	}
	return l
}

// CreateLink stores a new link.
func (s *Store) CreateLink(ctx context.Context, l domain.Link) error {
	if err := s.links.Put(toLinkItem(l)).If("attribute_not_exists($)", "link_id").Run(ctx); err != nil {
		return unavailable(err, "create link")
	}
	return nil
}

// CreatePreview stores a temporary agent and its preview link together.
func (s *Store) CreatePreview(ctx context.Context, a domain.Agent, l domain.Link) error {
	tx := s.agentPuts(s.db.WriteTx(), a).Put(s.links.Put(toLinkItem(l)).If("attribute_not_exists($)", "link_id"))
	if err := tx.Run(ctx); err != nil {
		return unavailable(err, "create preview")
	}
	return nil
}

// GetLink reads a link by id, whoever owns it (a link start has no caller
// identity: the id is the credential).
func (s *Store) GetLink(ctx context.Context, id string) (domain.Link, error) {
	var it linkItem
	err := s.links.Get("link_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return domain.Link{}, domain.ErrLinkNotFound
	}
	if err != nil {
		return domain.Link{}, unavailable(err, "get link")
	}
	return it.domain(), nil
}

// ListLinks returns a page of the user's links, newest first, without
// previews. A status filter is applied by the caller (expiry depends on
// the time of reading).
func (s *Store) ListLinks(ctx context.Context, userID string, page domain.Page) ([]domain.Link, string, error) {
	start, err := decodeCursor(page.Cursor, userID, "user_id", "created_at", "link_id")
	if err != nil {
		return nil, "", err
	}
	var items []linkItem
	next, err := s.links.Get("user_id", userID).Index(byUserIndex).Order(dynamo.Descending).
		Filter("attribute_not_exists($)", "preview").
		StartFrom(start).Limit(page.Limit).AllWithLastEvaluatedKey(ctx, &items)
	if err != nil {
		return nil, "", unavailable(err, "list links")
	}
	out := make([]domain.Link, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, encodeCursor(next), nil
}

// LinkChanges is a partial update decided from a fresh read; usesWas
// guards the use_limit rule against starts that raced the update.
type LinkChanges struct {
	SetName, ClearName         bool
	Name                       string
	Status                     *domain.LinkStatus
	SetExpires, ClearExpires   bool
	ExpiresAt                  time.Time
	SetUseLimit, ClearUseLimit bool
	UseLimit                   int
}

// UpdateLink applies c to the user's link. With a new use_limit the write
// holds only while uses is still below it.
func (s *Store) UpdateLink(ctx context.Context, userID, id string, c LinkChanges) (domain.Link, error) {
	u := s.links.Update("link_id", id).If("$ = ?", "user_id", userID)
	if c.SetName {
		u = u.Set("name", c.Name)
	}
	if c.ClearName {
		u = u.Remove("name")
	}
	if c.Status != nil {
		u = u.Set("status", string(*c.Status))
	}
	if c.SetExpires {
		u = u.Set("expires_at", formatTime(c.ExpiresAt))
	}
	if c.ClearExpires {
		u = u.Remove("expires_at")
	}
	if c.SetUseLimit {
		u = u.Set("use_limit", c.UseLimit).If("$ < ?", "uses", c.UseLimit)
	}
	if c.ClearUseLimit {
		u = u.Remove("use_limit")
	}
	var it linkItem
	err := u.Value(ctx, &it)
	if dynamo.IsCondCheckFailed(err) {
		return domain.Link{}, ErrChanged
	}
	if err != nil {
		return domain.Link{}, unavailable(err, "update link")
	}
	return it.domain(), nil
}

// DeleteLink removes one of the user's links.
func (s *Store) DeleteLink(ctx context.Context, userID, id string) error {
	err := s.links.Delete("link_id", id).If("$ = ?", "user_id", userID).Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return domain.ErrLinkNotFound
	}
	if err != nil {
		return unavailable(err, "delete link")
	}
	return nil
}
