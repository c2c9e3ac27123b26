package audiows

import (
	"net/http"
	"net/netip"
	"testing"
)

func TestClientOf(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name    string
		remote  string
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{"IPv4 peer", "198.51.100.7:5555", nil, nil, "198.51.100.7/32"},
		{"IPv6 peer counts by its /64", "[2001:db8:1:2:aaaa::1]:5555", nil, nil, "2001:db8:1:2::/64"},
		{"IPv4-mapped peer", "[::ffff:198.51.100.7]:5555", nil, nil, "198.51.100.7/32"},
		{"header from an untrusted peer is ignored", "198.51.100.7:5555", []string{"203.0.113.9"}, proxies, "198.51.100.7/32"},
		{"trusted proxy: the client it saw", "10.1.2.3:5555", []string{"203.0.113.9"}, proxies, "203.0.113.9/32"},
		{"trusted proxies in a chain", "10.1.2.3:5555", []string{"203.0.113.9, 10.9.9.9"}, proxies, "203.0.113.9/32"},
		{"entries left of the client are the client's own words", "10.1.2.3:5555", []string{"192.0.2.1", "203.0.113.9"}, proxies, "203.0.113.9/32"},
		{"trusted proxy without the header", "10.1.2.3:5555", nil, proxies, "10.1.2.3/32"},
		{"unreadable entry stops at the last known hop", "10.1.2.3:5555", []string{"203.0.113.9, junk"}, proxies, "10.1.2.3/32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tt.remote, Header: http.Header{}}
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := clientOf(r, tt.trusted); got.String() != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
