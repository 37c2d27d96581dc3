package lease

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidName(t *testing.T) {
	for _, ok := range []string{"p1", "owner-1.pool_a", strings.Repeat("a", MaxNameBytes)} {
		if err := ValidName("owner", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("a", MaxNameBytes+1), "a b", "a/b", "a\nb", "é", strings.Repeat("x", 64<<10)} {
		err := ValidName("owner", bad)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "owner") {
			t.Errorf("%.20q: got %v", bad, err)
		}
		if len(err.Error()) > 200 {
			t.Errorf("the error quotes too much: %d bytes", len(err.Error()))
		}
	}
}

func TestValidAddr(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:80", "[::1]:9000", "pod-1.svc.cluster.local:8080"} {
		if err := ValidAddr("addr", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1", "host:0", "host:65536", "host:x", ":80", "a_b:80", "a b:80", strings.Repeat("a", MaxAddrBytes) + ":1"} {
		if err := ValidAddr("addr", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%.20q: got %v", bad, err)
		}
	}
}

func TestValidHeaderName(t *testing.T) {
	for _, ok := range []string{"X-Fuge-Key", "x_tenant.id", "A!#$%&'*+^`|~"} {
		if err := ValidHeaderName("header", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "X Key", "X:Key", "X\r\nKey", strings.Repeat("h", MaxHeaderNameBytes+1)} {
		if err := ValidHeaderName("header", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}

func TestValidLeaseDuration(t *testing.T) {
	for _, d := range []time.Duration{MinLeaseDuration, 8 * time.Second, MaxLeaseDuration} {
		if err := ValidLeaseDuration("T", d); err != nil {
			t.Errorf("%v: %v", d, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second, MinLeaseDuration - 1, MaxLeaseDuration + 1, 1 << 62} {
		if err := ValidLeaseDuration("T", d); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: got %v", d, err)
		}
	}
}
