package benchtable

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	tests := []struct {
		name string
		ds   []time.Duration
		p    int
		want string
	}{
		{"empty", nil, 50, "-"},
		{"one", ms(7), 99, "7.0 ms"},
		{"median of odd", ms(5, 1, 3), 50, "3.0 ms"},
		{"median of even takes the lower", ms(4, 1, 3, 2), 50, "2.0 ms"},
		{"p99 of 10 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, "10.0 ms"},
		{"p90 of 10", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, "9.0 ms"},
		{"max", ms(2, 9, 4), 100, "9.0 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.ds, tt.p); got != tt.want {
				t.Fatalf("Percentile(%v, %d): got %q, want %q", tt.ds, tt.p, got, tt.want)
			}
		})
	}
}
