package domain

import (
	"math"
	"time"
)

// TryAgain is the ws_uri a started session reports until a renderer has
// joined the room and published its real WebSocket address.
const TryAgain = "try_again"

// Session is an avatar video session.
type Session struct {
	ID          string
	UserID      string
	KeyMode     string // "live" or "test": the kind of key that created it
	Status      SessionStatus
	TokenHash   string // SHA-256 of the session token; the token itself is never stored
	AspectRatio string
	Metadata    map[string]any
	Room        Room
	Avatar      AvatarSource
	CreatedAt   time.Time
	StartedAt   time.Time // zero until started
	EndedAt     time.Time // zero until ended
	// Expiration is when the session is ended automatically; zero means none.
	Expiration time.Time
	WSURI      string
	// JobEnqueuedAt is set once the renderer job is on the queue, so a repeated
	// start (or the reaper) re-sends a job that a failed send lost.
	JobEnqueuedAt time.Time
	// JobDeadline: a renderer may claim the session only before it; after
	// it, an unclaimed session is ended with ReasonNoCapacity.
	JobDeadline time.Time
	// WorkerID is the renderer worker that claimed the session, and
	// LeaseUntil how long its claim holds without a heartbeat.
	WorkerID   string
	LeaseUntil time.Time
	// JoiningAt is when the claiming renderer had the avatar ready and
	// began joining the room (start progress: StartStage).
	JoiningAt time.Time
	// ServedAt is when the renderer joined the room and reported ws_uri;
	// zero means the fleet never ran the session, which then bills nothing.
	ServedAt time.Time
	// PersonJoinedAt is when the renderer first saw a person (not an agent,
	// not the avatar) in a room the service created; such a session bills
	// from then, and one nobody joins bills nothing (ReasonNoShow).
	PersonJoinedAt time.Time
	// ReservedMinutes is what the start set aside from the account's
	// balance for this session (its expiration is StartedAt plus this); the
	// end gives it back, so concurrent sessions never spend the same minutes.
	ReservedMinutes int
	EndReason       string
	Billing         *Billing
	// Quality is what the renderer measured, once it left the room.
	Quality *Quality
	// Sessions the service started in a room it created carry where they
	// came from: the agent (its voice-agent settings), the link, and the
	// room's name.
	AgentID  string
	LinkID   string
	RoomName string
	// VoiceID and Transcription configure the voice pipeline.
	VoiceID       string
	Transcription bool
}

// End reasons recorded on ended sessions (Get Session shows them). Avatar
// failures add detail after a colon, e.g. "avatar_rejected: no face found".
const (
	ReasonEndedByCaller    = "ended_by_caller"
	ReasonParticipantsLeft = "participants_left"
	ReasonNoParticipants   = "no_participants"
	ReasonExpired          = "expired"
	ReasonRoomClosed       = "room_closed"
	ReasonRoomLost         = "room_connection_lost" // the connection to the room was lost for good
	ReasonRoomUnreachable  = "room_unreachable"     // the renderer could not join, or the room URL is not allowed
	ReasonRendererFailed   = "renderer_failed"
	ReasonWorkerDrained    = "worker_drained"    // the worker was shut down and its drain deadline passed
	ReasonWorkerLost       = "worker_lost"       // the worker stopped heartbeating (crashed); ended by the reaper
	ReasonNoCapacity       = "no_capacity"       // no renderer claimed the job before its deadline
	ReasonAgentUnavailable = "agent_unavailable" // the session's LiveKit voice agent could not be dispatched
	ReasonRemoved          = "removed_from_room" // someone with room admin rights (e.g. the voice agent closing) removed the avatar
	ReasonNoShow           = "no_show"           // nobody came to a room the service created (link, rooms/initiate): billed 0
)

// Room is the caller's WebRTC room. Stored, never returned.
type Room struct {
	Platform string `json:"platform"`
	URL      string `json:"url"`
	Token    string `json:"token"`
}

// AvatarSource says where the renderer fetches the avatar image: an https URL
// or an object in the media bucket (for data URIs, stored at creation).
type AvatarSource struct {
	URL       string `json:"url,omitempty"`
	Bucket    string `json:"bucket,omitempty"`
	Key       string `json:"key,omitempty"`
	MediaType string `json:"media_type,omitempty"`
}

// Room platforms accepted at the API.
const (
	PlatformLiveKit = "livekit"
	PlatformDaily   = "daily"
)

// AspectRatios the renderer supports.
var AspectRatios = []string{"4:3", "3:4", "1:1"}

// ValidAspectRatio reports whether ar is one of AspectRatios.
func ValidAspectRatio(ar string) bool {
	for _, a := range AspectRatios {
		if a == ar {
			return true
		}
	}
	return false
}

// ErrSessionNotFound answers a missing session, and another tenant's, alike.
var ErrSessionNotFound = Errorf(NotFound, "Session not found").
	WithSuggestion("Verify the session ID and that the session belongs to this account")

// Expiration is when a session started at startedAt must end: the plan's cap
// on one session, and never later than the minutes the account has left.
func Expiration(startedAt time.Time, plan Plan, minutesLeft int) time.Time {
	limit := minutesLeft
	if plan.MaxSessionMinutes > 0 && plan.MaxSessionMinutes < limit {
		limit = plan.MaxSessionMinutes
	}
	return startedAt.Add(time.Duration(limit) * time.Minute)
}

// DurationSeconds is how long the session has run: up to now while started,
// up to its end once ended, 0 before start.
func (s Session) DurationSeconds(now time.Time) int {
	switch {
	case s.StartedAt.IsZero():
		return 0
	case !s.EndedAt.IsZero():
		return int(s.EndedAt.Sub(s.StartedAt) / time.Second)
	default:
		return max(0, int(now.Sub(s.StartedAt)/time.Second))
	}
}

// BillableEnd is the instant billing stops: the end, but never past the
// expiration, nor past the last lease a renderer held (a reaper that ends a
// session late, or after its worker died, does not bill the delay).
func (s Session) BillableEnd(endedAt time.Time) time.Time {
	if !s.Expiration.IsZero() && endedAt.After(s.Expiration) {
		endedAt = s.Expiration
	}
	if !s.LeaseUntil.IsZero() && endedAt.After(s.LeaseUntil) {
		endedAt = s.LeaseUntil
	}
	return endedAt
}

// BillableMinutes is what ending the session at endedAt costs: nothing if
// the fleet never served it (no capacity, avatar rejected, room
// unreachable), nor if it is in a room the service created and no person
// ever joined it; else its running time rounded up to whole minutes, counted
// from the first person's arrival in hosted rooms.
func (s Session) BillableMinutes(endedAt time.Time) int {
	if s.ServedAt.IsZero() {
		return 0
	}
	from := s.StartedAt
	if s.Hosted() {
		if s.PersonJoinedAt.IsZero() {
			return 0
		}
		from = s.PersonJoinedAt
	}
	return MinutesUsed(s.BillableEnd(endedAt).Sub(from))
}

// Hosted reports whether the session runs in a room the service created
// (a link or rooms/initiate), where a person must come for it to bill.
func (s Session) Hosted() bool { return s.RoomName != "" }

// MinutesUsed rounds a running time up to whole minutes; any started session
// consumes at least one minute.
func MinutesUsed(d time.Duration) int {
	if d <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(d.Minutes())))
}

// EndGuard narrows an automatic end to the situation it was decided in, so
// a decision made from an older read never ends a session that has moved
// on: the reaper ends a lost worker's session only while that worker still
// holds it and its lease is still lapsed, an unclaimed one only while no
// worker has claimed it, and a worker ends only sessions it still holds.
// The zero guard always holds.
type EndGuard struct {
	WorkerID      string    // still claimed by this worker
	Unclaimed     bool      // no worker has claimed it
	LeaseLapsedBy time.Time // its lease ended before this instant
}

// Holds reports whether s is still in the guarded situation.
func (g EndGuard) Holds(s Session) bool {
	switch {
	case g.WorkerID != "" && s.WorkerID != g.WorkerID:
		return false
	case g.Unclaimed && s.WorkerID != "":
		return false
	case !g.LeaseLapsedBy.IsZero() && !s.LeaseUntil.Before(g.LeaseLapsedBy):
		return false
	}
	return true
}

// The stages a started session passes through before its renderer reports
// ws_uri: PUT start answers one of them while ws_uri is TryAgain.
const (
	StageQueued  = "queued"  // the job waits for a renderer to claim it
	StageClaimed = "claimed" // a renderer took it and is fetching the avatar
	StageJoining = "joining" // the renderer is joining the room
)

// StartStage says where a started session that has no ws_uri yet is; ""
// once ws_uri is known or when the session is not started.
func (s Session) StartStage() string {
	switch {
	case s.Status != StatusStarted || s.WSURI != TryAgain:
		return ""
	case s.WorkerID == "":
		return StageQueued
	case !s.JoiningAt.IsZero():
		return StageJoining
	default:
		return StageClaimed
	}
}

// StageRetryAfter is how long a caller should wait before asking again at
// a stage: about the time the stage takes with a renderer free (a claim
// follows the queue's long poll at once, an avatar fetch takes a few
// hundred milliseconds, a room join about 300 ms).
func StageRetryAfter(stage string) time.Duration {
	switch stage {
	case StageQueued:
		return 500 * time.Millisecond
	case StageClaimed:
		return 300 * time.Millisecond
	default:
		return 200 * time.Millisecond
	}
}
