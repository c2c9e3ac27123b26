package domain

// The session state machine: a session's states, the events that can
// happen to it, and Next, the one table of which event each state accepts.
// The services apply it (shared/sessions); the store's conditional writes
// make each transition atomic.

// SessionStatus is a session's state.
type SessionStatus string

const (
	StatusCreated SessionStatus = "created"
	StatusStarted SessionStatus = "started"
	StatusEnded   SessionStatus = "ended"
)

// Event is something that can happen to a session.
type Event string

const (
	EventStart     Event = "start"      // PUT start: repeats are answered with the stored ws_uri
	EventStartOnce Event = "start_once" // POST start (second form): a repeat is an error
	EventEnd       Event = "end"        // the caller ends it
	EventAutoEnd   Event = "auto_end"   // everyone left the room, or the expiration passed
	EventDelete    Event = "delete"
)

// Outcome says what a transition does.
type Outcome int

const (
	Apply  Outcome = iota // change state
	Repeat                // already in the target state: answer as before, change nothing
)

// Errors of the transitions Next refuses, shared by every route that can
// produce them.
var (
	ErrStartEnded = Errorf(Conflict, "Cannot start an ended session").
			WithSuggestion("An ended session cannot be restarted; create a new session")
	ErrAlreadyStarted  = Errorf(Conflict, "Session is already started")
	ErrEndNeverStarted = Errorf(Conflict, "Cannot end a session that was never started").
				WithSuggestion("Only started sessions can be ended; start the session first, or delete it")
	ErrDeleteStarted = Errorf(Conflict, "Cannot delete a session that has been started").
				WithSuggestion("Only sessions in the created state can be deleted; started and ended sessions are kept as history")
)

// Next is the session state machine: the one place that says which events
// each state accepts. It returns the state to move to and whether that is a
// change or an idempotent repeat, or the error to answer with.
// Delete moves to "" (the record is removed).
func Next(from SessionStatus, ev Event) (SessionStatus, Outcome, error) {
	switch from {
	case StatusCreated:
		switch ev {
		case EventStart, EventStartOnce:
			return StatusStarted, Apply, nil
		case EventEnd:
			return from, 0, ErrEndNeverStarted
		case EventAutoEnd:
			// Nothing runs before start, so there is nothing to end.
			return from, Repeat, nil
		case EventDelete:
			return "", Apply, nil
		}
	case StatusStarted:
		switch ev {
		case EventStart:
			return StatusStarted, Repeat, nil
		case EventStartOnce:
			return from, 0, ErrAlreadyStarted
		case EventEnd, EventAutoEnd:
			return StatusEnded, Apply, nil
		case EventDelete:
			return from, 0, ErrDeleteStarted
		}
	case StatusEnded:
		switch ev {
		case EventStart, EventStartOnce:
			return from, 0, ErrStartEnded
		case EventEnd, EventAutoEnd:
			return StatusEnded, Repeat, nil
		case EventDelete:
			return from, 0, ErrDeleteStarted
		}
	}
	return from, 0, Errorf(Internal, "Unknown session state %q or event %q", from, ev)
}
