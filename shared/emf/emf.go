// Package emf writes CloudWatch embedded metric format lines: a process
// prints one JSON line per measurement on stdout, and CloudWatch (Lambda's
// log pipeline, or the CloudWatch agent on the renderer hosts) turns it
// into metrics, with no API call and no SDK. The renderer fleet, the
// reaper and the webhook deliverer write their metrics through it; the
// alarms in template.yaml and infra/ are checked against what they write
// (scripts/opstest).
package emf

import (
	"encoding/json"
	"io"
	"sort"
	"sync"
	"time"
)

// Namespaces of the service's own metrics.
const (
	RendererNamespace = "avatarsvc/renderer" // the worker's (METRICS_NAMESPACE)
	APINamespace      = "avatarsvc/api"      // the reaper's and the webhook deliverer's
)

// Metric is one value in a line.
type Metric struct {
	Name  string
	Unit  string // Count, Percent, Milliseconds, Kilobits/Second, ...
	Value any
}

// Writer writes lines in one namespace. Safe for concurrent use.
type Writer struct {
	Namespace string
	mu        sync.Mutex
	out       io.Writer
}

// New returns a Writer of namespace's lines to out.
func New(out io.Writer, namespace string) *Writer { return &Writer{Namespace: namespace, out: out} }

type metricDef struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type directive struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []metricDef `json:"Metrics"`
}

// Write emits one line: metrics at time at, under dims (one dimension set
// holding every name in dims; none for an empty map).
func (w *Writer) Write(at time.Time, dims map[string]string, metrics ...Metric) error {
	if w == nil {
		return nil
	}
	names := make([]string, 0, len(dims))
	for k := range dims {
		names = append(names, k)
	}
	sort.Strings(names)
	defs := make([]metricDef, len(metrics))
	line := map[string]any{}
	for i, m := range metrics {
		defs[i] = metricDef{Name: m.Name, Unit: m.Unit}
		line[m.Name] = m.Value
	}
	for k, v := range dims {
		line[k] = v
	}
	line["_aws"] = map[string]any{
		"Timestamp":         at.UnixMilli(),
		"CloudWatchMetrics": []directive{{Namespace: w.Namespace, Dimensions: [][]string{names}, Metrics: defs}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.out.Write(append(b, '\n'))
	return err
}
