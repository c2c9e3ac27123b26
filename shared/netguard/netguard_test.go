package netguard

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestCheckURL(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	tests := []struct {
		name    string
		policy  Policy
		url     string
		wantErr error
	}{
		{"public address", Policy{}, "wss://93.184.216.34/rtc", nil},
		{"loopback refused", Policy{}, "ws://127.0.0.1:7880", ErrAddressNotAllowed},
		{"localhost resolves to loopback", Policy{}, "ws://localhost:7880", ErrAddressNotAllowed},
		{"loopback opted in", Policy{AllowPrefixes: loopback}, "ws://127.0.0.1:7880", nil},
		{"other loopback address still refused", Policy{AllowPrefixes: loopback}, "ws://127.0.0.2:7880", ErrAddressNotAllowed},
		{"private network", Policy{}, "wss://10.0.0.1", ErrAddressNotAllowed},
		{"CGNAT", Policy{}, "wss://100.64.0.1", ErrAddressNotAllowed},
		{"cloud metadata", Policy{}, "http://169.254.169.254/latest/meta-data/", ErrAddressNotAllowed},
		{"IPv6 loopback", Policy{}, "ws://[::1]:7880", ErrAddressNotAllowed},
		{"IPv4-mapped loopback", Policy{}, "ws://[::ffff:127.0.0.1]:7880", ErrAddressNotAllowed},
		{"host not on the allowlist", Policy{AllowHosts: []string{".livekit.cloud"}}, "wss://93.184.216.34", ErrHostNotAllowed},
		{"not a URL", Policy{}, "::::", ErrHostNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := tt.policy.CheckURL(ctx, tt.url)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("CheckURL(%q): got %v, want %v", tt.url, err, tt.wantErr)
			}
		})
	}
}

func TestHostAllowed(t *testing.T) {
	p := Policy{AllowHosts: []string{"rooms.example.com", ".livekit.cloud"}}
	tests := []struct {
		host string
		want bool
	}{
		{"rooms.example.com", true},
		{"ROOMS.example.com.", true},
		{"evil-rooms.example.com", false},
		{"my-app.livekit.cloud", true},
		{"livekit.cloud.evil.com", false},
		{"example.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			if got := p.HostAllowed(tt.host); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if !(Policy{}).HostAllowed("anything.example") {
		t.Error("an empty allowlist should allow any host")
	}
}

// TestDialerRefusesBeforeConnecting: the guard runs in the dialer's Control
// hook, after the socket exists and before connect, so nothing is sent.
func TestDialerRefusesBeforeConnecting(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9", "10.0.0.1:443", "169.254.169.254:80"} {
		t.Run(addr, func(t *testing.T) {
			_, err := Policy{}.Dialer(time.Second).DialContext(context.Background(), "tcp", addr)
			if !errors.Is(err, ErrAddressNotAllowed) {
				t.Errorf("dial %s: got %v, want ErrAddressNotAllowed", addr, err)
			}
		})
	}
}

func TestParsePrefixes(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"127.0.0.1/32", []string{"127.0.0.1/32"}, false},
		{"127.0.0.1, 10.1.2.3/8", []string{"127.0.0.1/32", "10.0.0.0/8"}, false},
		{"::1", []string{"::1/128"}, false},
		{"not-an-address", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePrefixes(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err: got %v, want error %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].String() != tt.want[i] {
					t.Errorf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestAddrAllowed(t *testing.T) {
	p := Policy{AllowPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	tests := []struct {
		addr string
		want bool
	}{
		{"93.184.216.34", true},
		{"127.0.0.1", true},
		{"::ffff:127.0.0.1", true},
		{"127.0.0.2", false},
		{"10.0.0.1", false},
		{"169.254.169.254", false},
		{"::1", false},
		{"fd00::2", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := p.AddrAllowed(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if (Policy{}).AddrAllowed(netip.Addr{}) {
		t.Error("the zero address: got allowed, want refused")
	}
}

func TestResolve(t *testing.T) {
	loopback := Policy{AllowPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}}
	tests := []struct {
		name    string
		policy  Policy
		host    string
		want    string // first address
		wantErr error
	}{
		{"IP literal", Policy{}, "93.184.216.34", "93.184.216.34", nil},
		{"mapped literal is unmapped", loopback, "::ffff:127.0.0.1", "127.0.0.1", nil},
		{"name whose every address is allowed", loopback, "localhost", "", nil},
		{"name resolving to a refused address", Policy{}, "localhost", "", ErrAddressNotAllowed},
		{"host off the allowlist", Policy{AllowHosts: []string{".livekit.cloud"}}, "93.184.216.34", "", ErrHostNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := tt.policy.Resolve(ctx, tt.host)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err: got %v, want %v", err, tt.wantErr)
			}
			if err == nil && len(got) == 0 {
				t.Fatal("got no addresses, want at least one")
			}
			if tt.want != "" && got[0].String() != tt.want {
				t.Errorf("got %v, want %s first", got, tt.want)
			}
		})
	}
}
