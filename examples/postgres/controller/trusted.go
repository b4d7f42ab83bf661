package controller

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Messages of a --sweep-trusted-hosts entry that is refused at start-up.
// Each names the entry and says how to write it.
const (
	msgTrustedNoPort = "sweep trusted host %q has no port: write host:port (for example 127.0.0.1:5432, [::1]:5432 or pg.sidecar.local:5432). " +
		"A host alone would trust every port on it, and another process listening on another port (a splicing proxy) would be trusted too"
	msgTrustedBad = "sweep trusted host %q: %s; write host:port (for example 127.0.0.1:5432, [::1]:5432 or pg.sidecar.local:5432)"
)

// endpoint is one trusted host and port: host lower-case without a
// trailing dot, or an IP address in its canonical (unmapped) form.
type endpoint struct {
	host string
	port int32
}

// TrustedEndpoints are the exact host:port pairs whose every path from the
// operator the administrator vouches is authenticated outside PostgreSQL's
// TLS (--sweep-trusted-hosts): a sidecar proxy in the operator's pod that
// authenticates the server itself, say. A trust is for one port: the
// sidecar listens on one, and any other process on the same host (a
// splicing proxy) listens on another. So there are no wildcards, no
// prefixes and no host-only entries; unix sockets are not offered because
// a Server reaches PostgreSQL over TCP only. The nil value trusts nothing.
type TrustedEndpoints struct {
	set map[endpoint]bool
}

// NewTrustedEndpoints parses entries, each host:port with the host a DNS
// name or an IP address (IPv6 in brackets) and the port 1 to 65535. An
// entry without a port, a wildcard, a CIDR prefix or a path is an error
// naming it: trust is never silently widened to a host's every port, nor
// narrowed to a guessed one. No entries is the nil value.
func NewTrustedEndpoints(entries []string) (*TrustedEndpoints, error) {
	var t TrustedEndpoints
	for _, raw := range entries {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		ep, err := parseEndpoint(raw, e)
		if err != nil {
			return nil, err
		}
		if t.set == nil {
			t.set = map[endpoint]bool{}
		}
		t.set[ep] = true
	}
	if t.set == nil {
		return nil, nil
	}
	return &t, nil
}

func parseEndpoint(raw, e string) (endpoint, error) {
	if strings.HasPrefix(e, "/") || strings.HasPrefix(e, "@") {
		return endpoint{}, fmt.Errorf(msgTrustedBad, raw, "a unix socket; Servers reach PostgreSQL over TCP only")
	}
	// A host alone, in any spelling: an IP address (a bare IPv6 address
	// too, whose last group could be mistaken for a port), a bracketed
	// one, or a name without a colon.
	if _, err := netip.ParseAddr(e); err == nil || strings.HasSuffix(e, "]") || !strings.Contains(e, ":") {
		return endpoint{}, fmt.Errorf(msgTrustedNoPort, raw)
	}
	host, port, err := net.SplitHostPort(e)
	if err != nil {
		return endpoint{}, fmt.Errorf(msgTrustedBad, raw, "not host:port (an IPv6 address goes in brackets)")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return endpoint{}, fmt.Errorf(msgTrustedBad, raw, "the port is not a number from 1 to 65535")
	}
	switch {
	case strings.Contains(host, "/"), strings.Contains(host, "*"):
		return endpoint{}, fmt.Errorf(msgTrustedBad, raw, "a trusted host is one host, not a prefix or a wildcard")
	case isIPLike(host):
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" {
			return endpoint{}, fmt.Errorf(msgTrustedBad, raw, "not an IP address (write IPv4 without leading zeros, IPv6 without a zone)")
		}
		host = a.Unmap().String()
	default:
		host = normalName(host)
		if !validName(host) {
			return endpoint{}, fmt.Errorf(msgTrustedBad, raw, "not a DNS name or IP address")
		}
	}
	return endpoint{host: host, port: int32(p)}, nil
}

// Trusts reports whether the administrator vouches for host:port, host as
// a Server's spec.host spells it. A name is compared as a name and never
// resolved; an IP address is compared as an address.
func (t *TrustedEndpoints) Trusts(host string, port int32) bool {
	if t == nil {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return false // a zone picks an interface: never by a tenant
		}
		return t.set[endpoint{host: a.Unmap().String(), port: port}]
	}
	name := normalName(host)
	if !validName(name) {
		return false
	}
	return t.set[endpoint{host: name, port: port}]
}

// String lists the entries for the operator's log.
func (t *TrustedEndpoints) String() string {
	if t == nil {
		return "none"
	}
	out := make([]string, 0, len(t.set))
	for e := range t.set {
		out = append(out, net.JoinHostPort(e.host, strconv.Itoa(int(e.port))))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
