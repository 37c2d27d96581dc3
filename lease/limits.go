package lease

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Bounds on every name, address and duration that reaches the manager from
// outside. Each is checked once, where the input enters (the gRPC and admin
// edges), and a refused input changes nothing.
const (
	// MaxNameBytes bounds owner and namespace names (a DNS name's length).
	// Names use letters, digits, '-', '_' and '.': they appear in metrics
	// labels, xDS resource names and URLs without escaping.
	MaxNameBytes = 253
	// MaxAddrBytes bounds an owner's host:port (a DNS name, brackets, a port).
	MaxAddrBytes = MaxNameBytes + 2 + 1 + 5
	// MaxHeaderNameBytes bounds a routing header's name.
	MaxHeaderNameBytes = 64
	// MinLeaseDuration and MaxLeaseDuration bound a namespace's T: below,
	// renewals (every T/4) would flood the leader; above, a crash makes keys
	// unavailable for a day. T·65/60 never overflows in this range.
	MinLeaseDuration = 10 * time.Millisecond
	MaxLeaseDuration = 24 * time.Hour
)

// ErrInvalid is wrapped by every error of this file.
var ErrInvalid = errors.New("lease: invalid input")

// ValidName checks an owner or namespace name; what names the field. "."
// and ".." are refused: a URL path cannot carry them as a segment.
func ValidName(what, s string) error {
	if s == "" || len(s) > MaxNameBytes {
		return fmt.Errorf("%w: %s must be 1 to %d bytes, got %d", ErrInvalid, what, MaxNameBytes, len(s))
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q is a path segment of its own", ErrInvalid, what, s)
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return fmt.Errorf("%w: %s %.40q: byte %d (%q) is not a letter, digit, '-', '_' or '.'", ErrInvalid, what, s, i, s[i])
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// ValidAddr checks an owner's advertised address: host:port, bounded, the
// port a number from 1 to 65535, the host a name or an IP address.
func ValidAddr(what, s string) error {
	if s == "" || len(s) > MaxAddrBytes {
		return fmt.Errorf("%w: %s must be host:port of 1 to %d bytes, got %d", ErrInvalid, what, MaxAddrBytes, len(s))
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%w: %s %.40q is not host:port", ErrInvalid, what, s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%w: %s %.40q: port must be 1 to 65535", ErrInvalid, what, s)
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if host == "" {
		return fmt.Errorf("%w: %s %.40q has no host", ErrInvalid, what, s)
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !nameByte(c) || c == '_' {
			return fmt.Errorf("%w: %s %.40q: the host is neither an IP address nor a DNS name", ErrInvalid, what, s)
		}
	}
	return nil
}

// ValidHeaderName checks a routing header's name: an HTTP token (RFC 9110
// §5.6.2), at most MaxHeaderNameBytes.
func ValidHeaderName(what, s string) error {
	if s == "" || len(s) > MaxHeaderNameBytes {
		return fmt.Errorf("%w: %s must be 1 to %d bytes, got %d", ErrInvalid, what, MaxHeaderNameBytes, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !nameByte(c) && !tokenPunct(c) {
			return fmt.Errorf("%w: %s %.40q: byte %d (%q) is not a token character", ErrInvalid, what, s, i, c)
		}
	}
	return nil
}

func tokenPunct(c byte) bool {
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '^', '`', '|', '~':
		return true
	}
	return false
}

// ValidLeaseDuration checks a namespace's T.
func ValidLeaseDuration(what string, d time.Duration) error {
	if d < MinLeaseDuration || d > MaxLeaseDuration {
		return fmt.Errorf("%w: %s %v must be from %v to %v", ErrInvalid, what, d, MinLeaseDuration, MaxLeaseDuration)
	}
	return nil
}
