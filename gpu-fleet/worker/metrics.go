package worker

import (
	"context"
	"io"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/emf"
)

// Metrics writes the worker's capacity and its sessions' quality as
// CloudWatch EMF lines (shared/emf), per autoscaling group. The group
// scales on SlotUtilization (target tracking) and keeps a floor of
// FreeSlots (infra/renderer-fleet.yaml).
type Metrics struct {
	// GroupName is the AutoScalingGroupName dimension ("" locally).
	GroupName string
	emf       *emf.Writer
}

// NewMetrics writes EMF lines to out.
func NewMetrics(out io.Writer, namespace, groupName string) *Metrics {
	return &Metrics{GroupName: groupName, emf: emf.New(out, namespace)}
}

func (m *Metrics) dims() map[string]string {
	return map[string]string{"AutoScalingGroupName": m.GroupName}
}

// Publish writes one line with the worker's slots now.
func (m *Metrics) Publish(at time.Time, slots, free int) error {
	return m.emf.Write(at, m.dims(),
		emf.Metric{Name: "FreeSlots", Unit: "Count", Value: free},
		emf.Metric{Name: "RunningSessions", Unit: "Count", Value: slots - free},
		emf.Metric{Name: "SlotUtilization", Unit: "Percent", Value: 100 * float64(slots-free) / float64(max(slots, 1))},
	)
}

// PublishQuality writes one line with a finished session's quality
// figures (domain.Quality), per autoscaling group: CloudWatch keeps their
// distribution (p50, p99 over sessions).
func (m *Metrics) PublishQuality(at time.Time, q domain.Quality) error {
	lateRatio := 0.0
	if q.Frames > 0 {
		lateRatio = 100 * float64(q.LateFrames) / float64(q.Frames)
	}
	return m.emf.Write(at, m.dims(),
		emf.Metric{Name: "SessionFirstFrame", Unit: "Milliseconds", Value: q.FirstFrameMS},
		emf.Metric{Name: "SessionLateFrames", Unit: "Percent", Value: lateRatio},
		emf.Metric{Name: "SessionLatencyP99", Unit: "Milliseconds", Value: q.LatencyP99MS},
		emf.Metric{Name: "SessionUnderruns", Unit: "Count", Value: q.Underruns},
		emf.Metric{Name: "SessionAVSkew", Unit: "Milliseconds", Value: q.MaxAVSkewMS},
		emf.Metric{Name: "SessionBitrate", Unit: "Kilobits/Second", Value: q.BitrateKbps},
	)
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
