package webhooks

import (
	"time"

	"avatarsvc/shared/domain"
)

// SessionData is the data of every session.* event. Fields that do not
// apply yet are left out; the room's join token never appears.
type SessionData struct {
	SessionID   string          `json:"session_id"`
	Status      string          `json:"status"`
	Metadata    map[string]any  `json:"metadata,omitempty"`
	WSURI       string          `json:"ws_uri,omitempty"`
	Room        *RoomData       `json:"room,omitempty"`
	AgentID     string          `json:"agent_id,omitempty"`
	LinkID      string          `json:"link_id,omitempty"`
	StartedAt   *time.Time      `json:"started_at,omitempty"`
	ExpiresAt   *time.Time      `json:"expires_at,omitempty"`
	EndedAt     *time.Time      `json:"ended_at,omitempty"`
	EndReason   string          `json:"end_reason,omitempty"`
	Billing     *domain.Billing `json:"billing,omitempty"`
	Quality     *domain.Quality `json:"quality,omitempty"`
	SecondsLeft *int            `json:"seconds_left,omitempty"`
	Reason      string          `json:"reason,omitempty"`
}

// RoomData is the room the avatar is in: the caller's (platform and url)
// or one the service created (its name too).
type RoomData struct {
	Platform string `json:"platform"`
	URL      string `json:"url"`
	Name     string `json:"name,omitempty"`
}

func sessionData(s domain.Session) SessionData {
	d := SessionData{SessionID: s.ID, Status: string(s.Status), Metadata: s.Metadata, AgentID: s.AgentID, LinkID: s.LinkID,
		StartedAt: timeOrNil(s.StartedAt), ExpiresAt: timeOrNil(s.Expiration), EndedAt: timeOrNil(s.EndedAt),
		EndReason: s.EndReason, Billing: s.Billing, Quality: s.Quality}
	if s.Room.URL != "" || s.RoomName != "" {
		d.Room = &RoomData{Platform: s.Room.Platform, URL: s.Room.URL, Name: s.RoomName}
	}
	return d
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// SessionStarted is sent once the renderer serves the session: its ws_uri
// is known and it is in the room.
func SessionStarted(s domain.Session, wsURI string, at time.Time) Event {
	d := sessionData(s)
	d.WSURI = wsURI
	return Event{Type: domain.EventSessionStarted, Timestamp: at.UTC(), Data: d}
}

// SessionExpiring is sent when secondsLeft remain before the session's
// expiration cuts it off.
func SessionExpiring(s domain.Session, expiresAt time.Time, secondsLeft int, at time.Time) Event {
	d := sessionData(s)
	d.ExpiresAt = timeOrNil(expiresAt)
	d.SecondsLeft = &secondsLeft
	return Event{Type: domain.EventSessionExpiring, Timestamp: at.UTC(), Data: d}
}

// SessionFinished is the event of an ended session: session.ended when a
// renderer served it, session.failed (with the end reason as reason) when
// its start was never served.
func SessionFinished(s domain.Session) Event {
	d := sessionData(s)
	if s.ServedAt.IsZero() {
		d.Reason = s.EndReason
		return Event{Type: domain.EventSessionFailed, Timestamp: s.EndedAt.UTC(), Data: d}
	}
	return Event{Type: domain.EventSessionEnded, Timestamp: s.EndedAt.UTC(), Data: d}
}

// LinkData is the data of link.exhausted.
type LinkData struct {
	LinkID    string     `json:"link_id"`
	AgentID   string     `json:"agent_id"`
	Reason    string     `json:"reason"` // use_limit_reached or expired
	Uses      int        `json:"uses"`
	UseLimit  *int       `json:"use_limit,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Reasons of link.exhausted.
const (
	LinkUseLimitReached = "use_limit_reached"
	LinkExpired         = "expired"
)

// LinkExhausted is sent when a link can start no more sessions.
func LinkExhausted(l domain.Link, reason string, at time.Time) Event {
	d := LinkData{LinkID: l.ID, AgentID: l.AgentID, Reason: reason, Uses: l.Uses, UseLimit: l.UseLimit}
	if l.ExpiresAt != nil {
		d.ExpiresAt = timeOrNil(*l.ExpiresAt)
	}
	return Event{Type: domain.EventLinkExhausted, Timestamp: at.UTC(), Data: d}
}
