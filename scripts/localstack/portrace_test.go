package localstack

import (
	"errors"
	"testing"
)

func TestRetryPortRaceTriesAgainOnlyAfterALostRace(t *testing.T) {
	other := errors.New("jar missing")
	tests := []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   error
	}{
		{"lost twice then started", []error{errPortTaken, errPortTaken, nil}, 3, nil},
		{"other failure is final", []error{other, nil}, 1, other},
		{"always lost gives up", []error{errPortTaken, errPortTaken, errPortTaken, errPortTaken, nil}, 4, errPortTaken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			_, err := retryPortRace(func() (int, error) {
				err := tt.errs[calls]
				calls++
				return calls, err
			})
			if calls != tt.wantCalls {
				t.Errorf("calls: got %d, want %d", calls, tt.wantCalls)
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("err: got %v, want %v", err, tt.wantErr)
			}
		})
	}
}
