package room

import (
	"fmt"
	"time"
)

// EndReason says why a session left its room.
type EndReason int

const (
	// NotEnded: the session is still running.
	NotEnded EndReason = iota
	// ParticipantsLeft: every other participant left and stayed away for
	// the grace period.
	ParticipantsLeft
	// NoParticipants: nobody joined within the join timeout.
	NoParticipants
	// Expired: the session's expiration time passed.
	Expired
	// Stopped: the owner stopped the session (context cancelled, Stop,
	// worker draining).
	Stopped
	// RoomClosed: the server closed the room on purpose (the API deleted
	// the room to end the session, the server shut down).
	RoomClosed
	// Removed: someone with room admin rights removed the avatar (a LiveKit
	// voice agent may do so when it closes).
	Removed
	// RoomError: the connection to the room was lost for good (the SDK's
	// reconnect attempts ran out), or the identity was taken over.
	RoomError
	// Failed: the session's own pipeline (renderer, encoder) failed.
	Failed
)

func (r EndReason) String() string {
	switch r {
	case NotEnded:
		return "not_ended"
	case ParticipantsLeft:
		return "participants_left"
	case NoParticipants:
		return "no_participants"
	case Expired:
		return "expired"
	case Stopped:
		return "stopped"
	case RoomClosed:
		return "room_closed"
	case Removed:
		return "removed"
	case RoomError:
		return "room_error"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("EndReason(%d)", int(r))
}

// presence decides when a session should end because of who is (not) in
// the room, or because it expired. It is pure logic fed with observations,
// so its rules are unit-tested without a server.
type presence struct {
	grace       time.Duration
	joinTimeout time.Duration
	expiresAt   time.Time // zero: never

	joinedAt   time.Time
	everJoined bool      // someone other than the avatar was seen
	emptySince time.Time // zero while someone is present
}

func newPresence(joinedAt time.Time, grace, joinTimeout time.Duration, expiresAt time.Time) *presence {
	return &presence{grace: grace, joinTimeout: joinTimeout, expiresAt: expiresAt, joinedAt: joinedAt}
}

// observe takes the number of other participants now in the room and
// whether the connection is reconnecting, and returns the reason to end,
// or NotEnded.
func (p *presence) observe(now time.Time, others int, reconnecting bool) EndReason {
	if !p.expiresAt.IsZero() && !now.Before(p.expiresAt) {
		return Expired
	}
	// While the SDK reconnects it forgets the remote participants, so an
	// empty list says nothing about who left. Restart the grace period once
	// the connection is back.
	if reconnecting {
		if !p.emptySince.IsZero() {
			p.emptySince = now
		}
		return NotEnded
	}
	if others > 0 {
		p.everJoined = true
		p.emptySince = time.Time{}
		return NotEnded
	}
	if !p.everJoined {
		if now.Sub(p.joinedAt) >= p.joinTimeout {
			return NoParticipants
		}
		return NotEnded
	}
	if p.emptySince.IsZero() {
		p.emptySince = now
	}
	if now.Sub(p.emptySince) >= p.grace {
		return ParticipantsLeft
	}
	return NotEnded
}
