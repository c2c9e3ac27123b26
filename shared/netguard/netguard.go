// Package netguard decides which network destinations the renderer may
// reach on a caller's behalf: the https avatar URLs it fetches and the
// LiveKit room URLs it dials. Both come from callers, so without a guard a
// caller could aim the renderer at loopback services, the VPC, or the cloud
// metadata endpoint (SSRF). The address check uses the maintained
// code.dny.dev/ssrf Guardian (IANA special-purpose registries: loopback,
// private, link-local and metadata, CGNAT, multicast, IPv6 outside global
// unicast, ...) and runs on the resolved address at connect time, so DNS
// rebinding and redirects are covered too.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// Errors, wrapped so errors.Is finds them.
var (
	ErrAddressNotAllowed = errors.New("address not allowed")
	ErrHostNotAllowed    = errors.New("host not allowed")
)

// Policy says what may be dialled. The zero Policy allows any public
// address on any port and nothing else.
type Policy struct {
	// AllowPrefixes are exempt from the private-address rule: local
	// development opts in to 127.0.0.1/32 for its livekit-server.
	AllowPrefixes []netip.Prefix
	// AllowHosts, when not empty, are the only host names that may be
	// dialled: exact names, or suffixes written ".example.com".
	AllowHosts []string
}

func (p Policy) guardian() *ssrf.Guardian {
	var v4, v6 []netip.Prefix
	for _, pr := range p.AllowPrefixes {
		if pr.Addr().Is4() {
			v4 = append(v4, pr)
		} else {
			v6 = append(v6, pr)
		}
	}
	return ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...))
}

// Dialer returns a net.Dialer whose Control hook refuses forbidden
// addresses after DNS resolution, before any packet is sent.
func (p Policy) Dialer(timeout time.Duration) *net.Dialer {
	g := p.guardian()
	return &net.Dialer{
		Timeout: timeout,
		Control: func(network, address string, c syscall.RawConn) error {
			if err := g.Safe(network, address, c); err != nil {
				return fmt.Errorf("%w: %v", ErrAddressNotAllowed, err)
			}
			return nil
		},
	}
}

// HostAllowed reports whether host passes AllowHosts.
func (p Policy) HostAllowed(host string) bool {
	if len(p.AllowHosts) == 0 {
		return true
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.AllowHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == host || (strings.HasPrefix(h, ".") && strings.HasSuffix(host, h)) {
			return true
		}
	}
	return false
}

// CheckURL decides up front whether raw may be reached: its host must pass
// AllowHosts, and every address it resolves to must be allowed. It lets a
// caller refuse a room early with a clear reason; the connections
// themselves still go through Dialer (see gpu-fleet/room's guard), since
// the name may resolve differently by then.
func (p Policy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return fmt.Errorf("%w: %q is not a URL with a host", ErrHostNotAllowed, raw)
	}
	_, err = p.Resolve(ctx, u.Hostname())
	return err
}

// Resolve returns host's addresses when host passes AllowHosts and every
// address it resolves to is allowed (an IP literal is its own address).
// A caller that then connects to one of them has pinned the name to what
// was checked.
func (p Policy) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if !p.HostAllowed(host) {
		return nil, fmt.Errorf("%w: %s", ErrHostNotAllowed, host)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		addrs = ips
	}
	g := p.guardian()
	for i, a := range addrs {
		addrs[i] = a.Unmap()
		if err := g.SafeAddr(addrs[i]); err != nil {
			return nil, fmt.Errorf("%w: %s resolves to %s", ErrAddressNotAllowed, host, a)
		}
	}
	return addrs, nil
}

// AddrAllowed reports whether a may be reached (an ICE candidate's address,
// for instance).
func (p Policy) AddrAllowed(a netip.Addr) bool {
	return a.IsValid() && p.guardian().SafeAddr(a.Unmap()) == nil
}

// ParsePrefixes reads a comma-separated list of CIDR prefixes or single
// addresses (an address stands for its /32 or /128).
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or CIDR prefix", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
