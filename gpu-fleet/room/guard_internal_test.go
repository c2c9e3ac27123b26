package room

import (
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"avatarsvc/shared/netguard"
)

// The filter's rules on the strings a room server sends, under a policy
// that allows 127.0.0.1 and ::1 and refuses the rest of loopback.
func testFilter() *signalFilter {
	p := netguard.Policy{AllowPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}}
	return &signalFilter{guard: p, log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
}

func TestICEServerURLs(t *testing.T) {
	tests := []struct {
		in     string
		want   string
		wantOK bool
	}{
		{"turn:127.0.0.1:3478?transport=udp", "turn:127.0.0.1:3478?transport=udp", true},
		{"stun:[::1]:3478", "stun:[::1]:3478", true},
		{"stun:127.0.0.1", "stun:127.0.0.1", true},
		{"turn:127.0.0.2:3478?transport=udp", "", false},
		{"turn:10.0.0.1:3478", "", false},
		{"stun:169.254.169.254:3478", "", false},
		// A name is pinned to the checked IPv4 address; TLS keeps the name.
		{"turn:localhost:3478?transport=tcp", "turn:127.0.0.1:3478?transport=tcp", true},
		{"turns:localhost:443?transport=tcp", "turns:localhost:443?transport=tcp", true},
		{"http://127.0.0.1/", "", false},
		{"turn:", "", false},
	}
	f := testFilter()
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := f.iceURL(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("got %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestSDPCandidates(t *testing.T) {
	in := strings.Join([]string{
		"v=0",
		"m=audio 9 UDP/TLS/RTP/SAVPF 111",
		"a=mid:0",
		"a=candidate:1 1 udp 2130706431 127.0.0.1 7882 typ host",
		"a=candidate:2 1 udp 2130706431 127.0.0.2 7882 typ host",
		"a=candidate:3 1 udp 2130706431 10.1.2.3 7882 typ host",
		"a=candidate:4 1 udp 2130706431 abcd.local 7882 typ host",
		"a=candidate:5 1 tcp 1671430143 127.0.0.1 7881 typ host tcptype passive",
		"a=end-of-candidates",
		"",
	}, "\r\n")
	want := strings.Join([]string{
		"v=0",
		"m=audio 9 UDP/TLS/RTP/SAVPF 111",
		"a=mid:0",
		"a=candidate:1 1 udp 2130706431 127.0.0.1 7882 typ host",
		"a=candidate:5 1 tcp 1671430143 127.0.0.1 7881 typ host tcptype passive",
		"a=end-of-candidates",
		"",
	}, "\r\n")
	got, changed := testFilter().sdp(in)
	if got != want || !changed {
		t.Errorf("got changed=%v\n%s\nwant changed=true\n%s", changed, got, want)
	}
	if _, changed := testFilter().sdp(want); changed {
		t.Error("an SDP with only allowed candidates: got changed, want unchanged")
	}
}
