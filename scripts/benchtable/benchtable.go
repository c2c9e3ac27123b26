// Package benchtable holds what the bench commands (make bench) print
// their tables with: percentiles of measured durations and the load the
// box was under.
package benchtable

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Percentile is the p-th percentile (nearest rank, 0 < p <= 100) of ds,
// formatted in milliseconds with one decimal, or "-" when ds is empty.
func Percentile(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max(0, min(len(s)-1, (len(s)*p+99)/100-1))
	return fmt.Sprintf("%.1f ms", float64(s[i])/float64(time.Millisecond))
}

// LoadAvg is the one-minute load average, or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
