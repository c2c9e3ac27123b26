package domain

// Quality is what the renderer measured over one session, written on the
// session when the renderer leaves the room (Get Session's quality block,
// an extension; the README explains each figure).
type Quality struct {
	// FirstFrameMS: from the renderer's claim to its first published frame
	// (avatar fetch, room join, first encode).
	FirstFrameMS int64 `json:"first_frame_ms" dynamo:"first_frame_ms"`
	// Frames published (25 a second) and, of those, written more than
	// 20 ms after their schedule.
	Frames     uint64 `json:"frames" dynamo:"frames"`
	LateFrames uint64 `json:"late_frames" dynamo:"late_frames"`
	// Audio arrival to the encoded frame showing it, over the last 1,000
	// chunks; absent (0) when no speech came.
	LatencyP50MS float64 `json:"latency_p50_ms" dynamo:"latency_p50_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms" dynamo:"latency_p99_ms"`
	// Underruns: frames in which speech under way ran out of audio (the
	// caller sent slower than real time).
	Underruns uint64 `json:"underruns" dynamo:"underruns"`
	// MaxAVSkewMS: the largest gap between writing a frame's video and its
	// audio.
	MaxAVSkewMS float64 `json:"max_av_skew_ms" dynamo:"max_av_skew_ms"`
	// BitrateKbps: encoded video and audio, averaged from the first frame.
	BitrateKbps float64 `json:"bitrate_kbps" dynamo:"bitrate_kbps"`
	// Subscribers: the most other participants in the room at once.
	Subscribers int `json:"subscribers" dynamo:"subscribers"`
}
