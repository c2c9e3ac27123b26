package domain

import "testing"

func TestNext(t *testing.T) {
	for _, tc := range []struct {
		from    SessionStatus
		ev      Event
		to      SessionStatus
		outcome Outcome
		err     error
	}{
		{StatusCreated, EventStart, StatusStarted, Apply, nil},
		{StatusCreated, EventStartOnce, StatusStarted, Apply, nil},
		{StatusStarted, EventStart, StatusStarted, Repeat, nil},
		{StatusStarted, EventStartOnce, StatusStarted, 0, ErrAlreadyStarted},
		{StatusEnded, EventStart, StatusEnded, 0, ErrStartEnded},
		{StatusEnded, EventStartOnce, StatusEnded, 0, ErrStartEnded},
		{StatusStarted, EventEnd, StatusEnded, Apply, nil},
		{StatusEnded, EventEnd, StatusEnded, Repeat, nil},
		{StatusCreated, EventEnd, StatusCreated, 0, ErrEndNeverStarted},
		{StatusStarted, EventAutoEnd, StatusEnded, Apply, nil},
		{StatusEnded, EventAutoEnd, StatusEnded, Repeat, nil},
		{StatusCreated, EventAutoEnd, StatusCreated, Repeat, nil},
		{StatusCreated, EventDelete, "", Apply, nil},
		{StatusStarted, EventDelete, StatusStarted, 0, ErrDeleteStarted},
		{StatusEnded, EventDelete, StatusEnded, 0, ErrDeleteStarted},
	} {
		t.Run(string(tc.from)+" "+string(tc.ev), func(t *testing.T) {
			to, outcome, err := Next(tc.from, tc.ev)
			if err != tc.err {
				t.Fatalf("err: got %v, want %v", err, tc.err)
			}
			if err == nil && (to != tc.to || outcome != tc.outcome) {
				t.Errorf("got %s/%d, want %s/%d", to, outcome, tc.to, tc.outcome)
			}
		})
	}
}
