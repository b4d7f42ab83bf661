package controller

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrServerNotAllowed is wrapped when a Server's host is outside the
// operator's ServerPolicy.
var ErrServerNotAllowed = errors.New("server host not allowed")

// Reason and message of a Server, Role or Database whose Server points where
// the operator's administrator does not allow. The message names only what
// the user wrote (the host); the operator never dialled it.
const (
	ReasonServerNotAllowed  = "ServerNotAllowed"
	MessageServerNotAllowed = "host %q is not allowed by the operator's administrator (--allowed-servers): point the Server at an allowed host, or ask them to allow it; the operator has not contacted it"
)

// ServerPolicy says where Servers may point: the admin's answer to a tenant
// who would point a Server at an internal host to probe it from the
// operator's network position. A host is allowed when it is listed by name,
// lies under a listed wildcard, or is an IP literal inside a listed prefix.
// The check is on spec.host as written, before any lookup or dial: a name is
// never resolved to decide, and a host that is neither a listed name nor an
// IP literal is refused. The nil policy allows every host.
type ServerPolicy struct {
	names    map[string]bool // lower-case, no trailing dot
	suffixes []string        // from "*.example.com": ".example.com"
	prefixes []netip.Prefix
}

// NewServerPolicy parses entries, each one of: a host name
// ("db.example.com"), a wildcard ("*.db.example.com", any name below it, not
// the name itself), an IP address ("10.0.0.5", "::1") or a CIDR prefix
// ("10.0.0.0/8", "fd00::/8"). No entries is the nil policy (every host
// allowed). A malformed entry is an error naming it.
func NewServerPolicy(entries []string) (*ServerPolicy, error) {
	return parseHosts("allowed server", entries)
}

// parseHosts parses host entries as NewServerPolicy does; what names an
// entry in errors.
func parseHosts(what string, entries []string) (*ServerPolicy, error) {
	var p ServerPolicy
	n := 0
	for _, raw := range entries {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		n++
		switch {
		case strings.Contains(e, "/"):
			pfx, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("%s %q: not a CIDR prefix (for example 10.0.0.0/8): %w", what, raw, err)
			}
			if pfx.Addr().Zone() != "" {
				return nil, fmt.Errorf("%s %q: a prefix cannot carry an IPv6 zone", what, raw)
			}
			p.prefixes = append(p.prefixes, pfx.Masked())
		case isIPLike(e):
			a, err := netip.ParseAddr(e)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%s %q: not an IP address (write IPv4 without leading zeros, IPv6 without a zone)", what, raw)
			}
			a = a.Unmap()
			p.prefixes = append(p.prefixes, netip.PrefixFrom(a, a.BitLen()))
		case strings.HasPrefix(e, "*."):
			parent := normalName(e[2:])
			if !validName(parent) {
				return nil, fmt.Errorf("%s %q: not a wildcard over a DNS name (for example *.db.example.com)", what, raw)
			}
			p.suffixes = append(p.suffixes, "."+parent)
		default:
			name := normalName(e)
			if !validName(name) {
				return nil, fmt.Errorf("%s %q: not a DNS name, IP address or CIDR prefix", what, raw)
			}
			if p.names == nil {
				p.names = map[string]bool{}
			}
			p.names[name] = true
		}
	}
	if n == 0 {
		return nil, nil
	}
	return &p, nil
}

// Allows reports whether a Server may point at host.
func (p *ServerPolicy) Allows(host string) bool {
	if p == nil {
		return true
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return false // a zone picks an interface: never by a tenant
		}
		a = a.Unmap()
		for _, pfx := range p.prefixes {
			if pfx.Contains(a) {
				return true
			}
		}
		return false
	}
	name := normalName(host)
	if !validName(name) {
		return false // commas (several hosts), ports, escapes: never a listed name
	}
	if p.names[name] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// String lists the policy for the operator's log.
func (p *ServerPolicy) String() string {
	if p == nil {
		return "any host"
	}
	var out []string
	for n := range p.names {
		out = append(out, n)
	}
	for _, s := range p.suffixes {
		out = append(out, "*"+s)
	}
	for _, pfx := range p.prefixes {
		out = append(out, pfx.String())
	}
	return strings.Join(out, ",")
}

func normalName(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }

// isIPLike: an entry with a colon, or of digits and dots only, is meant as
// an address (so "10.0.0.256" is refused, not taken for a name); no DNS
// name has an all-numeric top-level label.
func isIPLike(s string) bool {
	return strings.Contains(s, ":") || strings.Trim(s, "0123456789.") == ""
}

// validName: DNS labels of letters, digits and '-', 1 to 63 bytes each,
// dot-separated, 253 bytes at most.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := range len(label) {
			c := label[i]
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	return true
}
