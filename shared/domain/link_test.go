package domain

import (
	"testing"
	"time"
)

func TestNormalizeOrigins(t *testing.T) {
	tests := []struct {
		in   []string
		want []string // nil: refused
	}{
		{[]string{"https://Example.COM"}, []string{"https://example.com"}},
		{[]string{"https://example.com:443/", "http://example.com:80"}, []string{"https://example.com", "http://example.com"}},
		{[]string{"http://127.0.0.1:8090", "http://127.0.0.1:8090/"}, []string{"http://127.0.0.1:8090"}},
		{[]string{"http://[::1]:3000"}, []string{"http://[::1]:3000"}},
		{[]string{"https://example.com:8443"}, []string{"https://example.com:8443"}},
		{[]string{"ws://example.com"}, nil},
		{[]string{"example.com"}, nil},
		{[]string{"https://example.com/a"}, nil},
		{[]string{"https://example.com#x"}, nil},
		{[]string{"https://example.com:99999"}, nil},
		{[]string{""}, nil},
		{[]string{}, nil},
	}
	for _, tt := range tests {
		got, err := NormalizeOrigins(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("NormalizeOrigins(%q): got %q, want a refusal", tt.in, got)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("NormalizeOrigins(%q): got %q, %v, want %q", tt.in, got, err, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("NormalizeOrigins(%q): got %q, want %q", tt.in, got, tt.want)
			}
		}
	}
}

func TestLinkPolicy(t *testing.T) {
	two, ten := 2, 10
	allowed := LinkPolicy{AllowedOrigins: []string{"https://shop.example.com"}}
	t.Run("origins", func(t *testing.T) {
		for origin, want := range map[string]error{
			"https://shop.example.com": nil, "https://SHOP.example.com:443": nil,
			"https://evil.example.com": ErrLinkOrigin, "": ErrLinkOrigin, "null": ErrLinkOrigin,
		} {
			if got := allowed.CheckOrigin(origin); got != want {
				t.Errorf("CheckOrigin(%q): got %v, want %v", origin, got, want)
			}
		}
		if got := (LinkPolicy{}).CheckOrigin(""); got != nil {
			t.Errorf("no list: got %v, want any page allowed", got)
		}
	})
	t.Run("visitor starts", func(t *testing.T) {
		if got, want := (LinkPolicy{}).VisitorStartLimit(), DefaultVisitorStartsPerMinute; got != want {
			t.Errorf("default: got %d, want %d", got, want)
		}
		if got := (LinkPolicy{VisitorStartsPerMinute: &ten}).VisitorStartLimit(); got != 10 {
			t.Errorf("set: got %d, want 10", got)
		}
	})
	t.Run("running sessions", func(t *testing.T) {
		l := Link{Status: LinkActive, LinkPolicy: LinkPolicy{MaxConcurrent: &two}, Running: 2}
		if got := l.CheckUsable(time.Now()); got != ErrLinkBusy {
			t.Errorf("at the limit: got %v, want %v", got, ErrLinkBusy)
		}
		l.Running = 1
		if got := l.CheckUsable(time.Now()); got != nil {
			t.Errorf("below the limit: got %v, want nil", got)
		}
	})
}

func TestVisitorAddress(t *testing.T) {
	tests := []struct{ in, want string }{
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"not an address", "not an address"},
	}
	for _, tt := range tests {
		if got := VisitorAddress(tt.in); got != tt.want {
			t.Errorf("VisitorAddress(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
