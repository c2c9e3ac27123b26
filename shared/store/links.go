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
	// The policy extensions (domain.LinkPolicy) and the running count.
	MaxConcurrent     *int     `dynamo:"max_concurrent,omitempty"`
	VisitorStarts     *int     `dynamo:"visitor_starts,omitempty"`
	AllowedOrigins    []string `dynamo:"allowed_origins,omitempty"`
	MaxSessionMinutes *int     `dynamo:"max_session_minutes,omitempty"`
	Running           int      `dynamo:"running,omitempty"`
	ExhaustedNoticed  bool     `dynamo:"exhausted_noticed,omitempty"` // link.exhausted went out (NoticeLinkExhausted)
}

func toLinkItem(l domain.Link) linkItem {
	it := linkItem{
		LinkID: l.ID, UserID: l.UserID, Name: l.Name, AgentID: l.AgentID, Status: string(l.Status), Uses: l.Uses,
		UseLimit: l.UseLimit, CreatedAt: formatTime(l.CreatedAt), Preview: l.Preview,
		MaxConcurrent: l.MaxConcurrent, VisitorStarts: l.VisitorStartsPerMinute, AllowedOrigins: l.AllowedOrigins,
		MaxSessionMinutes: l.MaxSessionMinutes, Running: l.Running,
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
		LinkPolicy: domain.LinkPolicy{
			MaxConcurrent: it.MaxConcurrent, VisitorStartsPerMinute: it.VisitorStarts, AllowedOrigins: it.AllowedOrigins,
			MaxSessionMinutes: it.MaxSessionMinutes,
		},
		Running: it.Running, ExhaustedNoticed: it.ExhaustedNoticed,
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
	if err := s.runTx(ctx, tx); err != nil {
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
	if it.UserID == "" {
		// What freeLinkSlot leaves of a link deleted while a session
		// through it ran: a bare counter.
		return domain.Link{}, domain.ErrLinkNotFound
	}
	return it.domain(), nil
}

// takeLinkUse is the link's part of the start transaction: the link is
// still the owner's, active, unexpired, within use_limit and within
// max_concurrent_sessions; its uses and running count go up.
func (s *Store) takeLinkUse(linkID, userID string, now time.Time) *dynamo.Update {
	return s.links.Update("link_id", linkID).Add("uses", 1).Add("running", 1).
		If("$ = ? AND $ = ?", "user_id", userID, "status", string(domain.LinkActive)).
		If("(attribute_not_exists($) OR $ > ?)", "expires_at", "expires_at", formatTime(now)).
		If("(attribute_not_exists($) OR $ < $)", "use_limit", "uses", "use_limit").
		If("(attribute_not_exists($) OR attribute_not_exists($) OR $ < $)", "max_concurrent", "running", "running", "max_concurrent")
}

// freeLinkSlot is the link's part of the end transaction: one fewer
// running session. It has no condition, so an end never fails for the
// link's sake; on a link deleted meanwhile it leaves a bare counter item
// that GetLink reads as not found (and the by-user index never sees, as it
// has no user_id). Sessions started before links counted them make the
// count go below zero, which only errs on the side of allowing starts.
func (s *Store) freeLinkSlot(linkID string) *dynamo.Update {
	return s.links.Update("link_id", linkID).Add("running", -1)
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
	// The policy extensions: Set* writes the field's value in Policy
	// (nil or empty removes it); fields not set stay.
	Policy                                                        domain.LinkPolicy
	SetMaxConcurrent, SetVisitorStarts, SetOrigins, SetMaxMinutes bool
}

// UpdateLink applies c to the user's link. With a new use_limit the write
// holds only while uses is still below it.
func (s *Store) UpdateLink(ctx context.Context, userID, id string, c LinkChanges) (domain.Link, error) {
	// Any change re-arms link.exhausted: a raised limit or a later
	// expiry makes the link usable again, and its next exhaustion news.
	u := s.links.Update("link_id", id).If("$ = ?", "user_id", userID).Remove("exhausted_noticed")
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
	u = setOrRemove(u, c.SetMaxConcurrent, "max_concurrent", c.Policy.MaxConcurrent)
	u = setOrRemove(u, c.SetVisitorStarts, "visitor_starts", c.Policy.VisitorStartsPerMinute)
	u = setOrRemove(u, c.SetMaxMinutes, "max_session_minutes", c.Policy.MaxSessionMinutes)
	if c.SetOrigins {
		if c.Policy.AllowedOrigins == nil {
			u = u.Remove("allowed_origins")
		} else {
			u = u.Set("allowed_origins", c.Policy.AllowedOrigins)
		}
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

func setOrRemove(u *dynamo.Update, set bool, name string, v *int) *dynamo.Update {
	switch {
	case !set:
		return u
	case v == nil:
		return u.Remove(name)
	default:
		return u.Set(name, *v)
	}
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

// NoticeLinkExhausted marks that link.exhausted was published for the link
// and reports whether this call was the first to mark it (so the event goes
// out once per exhaustion, whichever start or refusal notices it).
func (s *Store) NoticeLinkExhausted(ctx context.Context, id string) (bool, error) {
	err := s.links.Update("link_id", id).Set("exhausted_noticed", true).
		If("attribute_exists($) AND attribute_exists($) AND attribute_not_exists($)", "link_id", "user_id", "exhausted_noticed").Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, unavailable(err, "notice link exhausted")
	}
	return true, nil
}
