package domain

import (
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
	LinkPolicy
	// Running is how many sessions started through the link have not ended
	// (kept by the start and end transactions; max_concurrent_sessions
	// is checked against it).
	Running int
	// ExhaustedNoticed says link.exhausted was published for the current
	// exhaustion (cleared by any change to the link).
	ExhaustedNoticed bool
}

// LinkPolicy is what a link's owner may restrict beyond the contract's
// use_limit and expires_at (API extensions). nil and empty mean unset.
type LinkPolicy struct {
	MaxConcurrent *int // max_concurrent_sessions; nil: only the owner's plan
	// VisitorStartsPerMinute is max_starts_per_visitor_per_minute; nil:
	// DefaultVisitorStartsPerMinute.
	VisitorStartsPerMinute *int
	AllowedOrigins         []string // allowed_origins, normalized; nil: any page
	MaxSessionMinutes      *int     // max_session_minutes; nil: the owner's plan
}

// Bounds of the link policy fields. A visitor (one client address) may
// start a few sessions a minute through one link: enough to retry after a
// dropped connection, too few to drain the owner's concurrency. The top
// of its range is the per-link start bucket (150 a minute), above which a
// per-visitor limit means nothing.
const (
	DefaultVisitorStartsPerMinute = 3
	MaxVisitorStartsPerMinute     = 150
	MaxLinkConcurrent             = 1000
	MaxLinkSessionMinutes         = 24 * 60
	MaxAllowedOrigins             = 20
	maxOriginLength               = 253 + len("https://") + len(":65535")
)

// VisitorStartLimit is how many starts one client address may make
// through the link in a minute.
func (p LinkPolicy) VisitorStartLimit() int {
	if p.VisitorStartsPerMinute != nil {
		return *p.VisitorStartsPerMinute
	}
	return DefaultVisitorStartsPerMinute
}

// CheckBounds validates the set fields of p (AllowedOrigins already
// normalized by NormalizeOrigins).
func (p LinkPolicy) CheckBounds() error {
	if v := p.MaxConcurrent; v != nil && (*v < 1 || *v > MaxLinkConcurrent) {
		return Errorf(Invalid, "max_concurrent_sessions must be an integer from 1 to %d, or null", MaxLinkConcurrent).
			WithSuggestion("null leaves only the owner's plan limit")
	}
	if v := p.VisitorStartsPerMinute; v != nil && (*v < 1 || *v > MaxVisitorStartsPerMinute) {
		return Errorf(Invalid, "max_starts_per_visitor_per_minute must be an integer from 1 to %d, or null", MaxVisitorStartsPerMinute).
			WithSuggestion("null sets the default, 3 a minute")
	}
	if v := p.MaxSessionMinutes; v != nil && (*v < 1 || *v > MaxLinkSessionMinutes) {
		return Errorf(Invalid, "max_session_minutes must be an integer from 1 to %d, or null", MaxLinkSessionMinutes).
			WithSuggestion("null leaves the owner's plan limit")
	}
	return nil
}

// NormalizeOrigins checks a list of web origins (scheme://host[:port], as
// browsers send them in the Origin header) and returns them lowercased,
// without a default port or trailing slash, and without duplicates.
func NormalizeOrigins(list []string) ([]string, error) {
	if len(list) == 0 || len(list) > MaxAllowedOrigins {
		return nil, Errorf(Invalid, "allowed_origins must list 1 to %d origins, or be null", MaxAllowedOrigins).
			WithSuggestion("null allows any page")
	}
	out := make([]string, 0, len(list))
	for _, s := range list {
		o, ok := normalizeOrigin(s)
		if !ok {
			return nil, Errorf(Invalid, "allowed_origins: %q is not an origin", truncate(s, 80)).
				WithSuggestion("Give scheme://host[:port], for example https://www.example.com")
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

func normalizeOrigin(s string) (string, bool) {
	if len(s) > maxOriginLength {
		return "", false
	}
	u, err := url.Parse(strings.TrimSuffix(s, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.ContainsAny(s, "?#") {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if n, err := strconv.Atoi(port); port != "" && (err != nil || n < 1 || n > 65535) {
		return "", false
	}
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // IPv6
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host, true
}

// VisitorAddress is what one visitor's starts are counted by: an IPv4
// address, or the /64 network of an IPv6 one (what one subscriber usually
// gets, so a host cannot step through its own addresses to start more).
func VisitorAddress(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}

// ErrLinkOrigin refuses a start from a page the link's owner did not allow.
var ErrLinkOrigin = Errorf(Forbidden, "This link cannot be started from this page").
	WithSuggestion("The link's owner allows it only on their own pages (allowed_origins); open it from one of those")

// CheckOrigin applies allowed_origins to a start's Origin header. A request
// without one (not from a browser page) is refused too when the list is set.
// Browsers always send Origin on a cross-origin POST; a script can forge it,
// so this keeps other sites from embedding the link, not scripts out.
func (p LinkPolicy) CheckOrigin(origin string) error {
	if p.AllowedOrigins == nil {
		return nil
	}
	if o, ok := normalizeOrigin(origin); ok && slices.Contains(p.AllowedOrigins, o) {
		return nil
	}
	return ErrLinkOrigin
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
	ErrLinkBusy    = Errorf(LimitExceeded, "This link has reached its concurrent session limit").
			WithSuggestion("Try again when a conversation through this link ends")
)

// CheckUsable applies rule 1 of Start Session via Link, then the link's
// max_concurrent_sessions.
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
	if l.MaxConcurrent != nil && l.Running >= *l.MaxConcurrent {
		return ErrLinkBusy
	}
	return nil
}
