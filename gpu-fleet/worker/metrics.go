package worker

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"avatarsvc/shared/domain"
)

// Metrics writes the worker's capacity as CloudWatch embedded metric format
// (EMF) lines: the CloudWatch agent ships the worker's stdout, and CloudWatch
// turns each line into metrics, so no API call and no SDK is needed. The
// autoscaling group scales on SlotUtilization (target tracking) and keeps a
// floor of FreeSlots (infra/renderer-fleet.yaml).
type Metrics struct {
	Namespace string // e.g. avatarsvc/renderer
	// GroupName is the AutoScalingGroupName dimension ("" locally).
	GroupName string
	mu        sync.Mutex
	out       io.Writer
}

// NewMetrics writes EMF lines to out.
func NewMetrics(out io.Writer, namespace, groupName string) *Metrics {
	return &Metrics{Namespace: namespace, GroupName: groupName, out: out}
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

// Publish writes one line with the worker's slots now.
func (m *Metrics) Publish(at time.Time, slots, free int) error {
	return m.write(at, []emfMetric{
		{Name: "FreeSlots", Unit: "Count"},
		{Name: "RunningSessions", Unit: "Count"},
		{Name: "SlotUtilization", Unit: "Percent"},
	}, map[string]any{
		"FreeSlots":       free,
		"RunningSessions": slots - free,
		"SlotUtilization": 100 * float64(slots-free) / float64(max(slots, 1)),
	})
}

// PublishQuality writes one line with a finished session's quality
// figures (domain.Quality), per autoscaling group: CloudWatch keeps their
// distribution (p50, p99 over sessions).
func (m *Metrics) PublishQuality(at time.Time, q domain.Quality) error {
	lateRatio := 0.0
	if q.Frames > 0 {
		lateRatio = 100 * float64(q.LateFrames) / float64(q.Frames)
	}
	return m.write(at, []emfMetric{
		{Name: "SessionFirstFrame", Unit: "Milliseconds"},
		{Name: "SessionLateFrames", Unit: "Percent"},
		{Name: "SessionLatencyP99", Unit: "Milliseconds"},
		{Name: "SessionUnderruns", Unit: "Count"},
		{Name: "SessionAVSkew", Unit: "Milliseconds"},
		{Name: "SessionBitrate", Unit: "Kilobits/Second"},
	}, map[string]any{
		"SessionFirstFrame": q.FirstFrameMS,
		"SessionLateFrames": lateRatio,
		"SessionLatencyP99": q.LatencyP99MS,
		"SessionUnderruns":  q.Underruns,
		"SessionAVSkew":     q.MaxAVSkewMS,
		"SessionBitrate":    q.BitrateKbps,
	})
}

// write emits one EMF line: metrics' values, per AutoScalingGroupName.
func (m *Metrics) write(at time.Time, metrics []emfMetric, values map[string]any) error {
	line := map[string]any{
		"_aws": map[string]any{
			"Timestamp": at.UnixMilli(),
			"CloudWatchMetrics": []emfDirective{{
				Namespace:  m.Namespace,
				Dimensions: [][]string{{"AutoScalingGroupName"}},
				Metrics:    metrics,
			}},
		},
		"AutoScalingGroupName": m.GroupName,
	}
	for k, v := range values {
		line[k] = v
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err = m.out.Write(append(b, '\n'))
	return err
}

func (w *Worker) publishMetrics(ctx context.Context) {
	if w.cfg.Metrics == nil || w.cfg.MetricsEvery < 0 {
		return
	}
	t := time.NewTicker(w.cfg.MetricsEvery)
	defer t.Stop()
	for {
		if err := w.cfg.Metrics.Publish(w.cfg.Now(), w.cfg.Slots, w.FreeSlots()); err != nil {
			w.log.Warn("publish metrics", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
