package domain

import "time"

// Link is a shareable address that lets anyone start a session with its
// agent, billed to the link's owner. Its id is the credential.
type Link struct {
	ID        string
	UserID    string
	Name      *string
	AgentID   string
	Status    LinkStatus // as stored; see StatusAt
	Uses      int
	UseLimit  *int // nil: unlimited
	CreatedAt time.Time
	ExpiresAt *time.Time // nil: never
	// Preview links are made by POST /v1/avatars/preview for a temporary
	// agent: single use, five minutes.
	Preview bool
}

// LinkStatus is a link's state.
type LinkStatus string

const (
	LinkActive  LinkStatus = "active"
	LinkPaused  LinkStatus = "paused"
	LinkExpired LinkStatus = "expired"
)

// ValidLinkStatus reports one of the three states.
func ValidLinkStatus(s string) bool {
	switch LinkStatus(s) {
	case LinkActive, LinkPaused, LinkExpired:
		return true
	}
	return false
}

// LinkPrefix starts link ids; PreviewLifetime is how long a preview link lives.
const (
	LinkPrefix      = "lnk_"
	PreviewLifetime = 5 * time.Minute
)

// NewLinkID returns a link id with 128 random bits: the id is a credential.
func NewLinkID() string { return LinkPrefix + randomToken(16) }

// ErrLinkNotFound answers a missing link, or another tenant's.
var ErrLinkNotFound = Errorf(NotFound, "Link not found")

// ParseLinkID rejects what cannot be a link id with the not-found answer.
func ParseLinkID(s string) (string, error) {
	id, _, err := parseRef(s, LinkPrefix, ErrLinkNotFound, false)
	if err != nil || id == "" {
		return "", ErrLinkNotFound
	}
	return id, nil
}

// StatusAt is the status a reader sees: a link past expires_at is expired
// at once, with no background job.
func (l Link) StatusAt(now time.Time) LinkStatus {
	if l.ExpiresAt != nil && !now.Before(*l.ExpiresAt) {
		return LinkExpired
	}
	return l.Status
}

// Link start refusals, checked in the spec's order.
var (
	ErrLinkPaused  = Errorf(Forbidden, "This link is paused").WithSuggestion("Ask the link's owner to activate it")
	ErrLinkExpired = Errorf(Forbidden, "This link has expired").WithSuggestion("Ask the link's owner for a new link")
	ErrLinkUsedUp  = Errorf(Forbidden, "This link has reached its use limit").WithSuggestion("Ask the link's owner to raise its use limit")
)

// CheckUsable applies rule 1 of Start Session via Link.
func (l Link) CheckUsable(now time.Time) error {
	switch l.StatusAt(now) {
	case LinkPaused:
		return ErrLinkPaused
	case LinkExpired:
		return ErrLinkExpired
	}
	if l.UseLimit != nil && l.Uses >= *l.UseLimit {
		return ErrLinkUsedUp
	}
	return nil
}
