package ownerguard

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultCoreConfig(t *testing.T) {
	c := DefaultCoreConfig()
	if c.LeaseDuration != 8*time.Second || c.RenewInterval != 2*time.Second ||
		c.RaceBackoffMin != 8*time.Second/600 || c.RaceBackoffMax != 8*time.Second/60 {
		t.Errorf("DefaultCoreConfig() = %+v", c)
	}
	if err := c.Validate(); !errors.Is(err, ErrNoNamespace) {
		t.Errorf("defaults without identity: %v, want %v", err, ErrNoNamespace)
	}
	// Defaults scale with T.
	cfg := testConfig()
	cfg.LeaseDuration = 600 * time.Millisecond
	core, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := core.Config(); got.RenewInterval != 150*time.Millisecond ||
		got.RaceBackoffMin != time.Millisecond || got.RaceBackoffMax != 10*time.Millisecond {
		t.Errorf("defaults for T = 600ms: %+v", got)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(c *CoreConfig)
		want error
	}{
		{"valid", func(c *CoreConfig) {}, nil},
		{"no namespace", func(c *CoreConfig) { c.Namespace = "" }, ErrNoNamespace},
		{"no name", func(c *CoreConfig) { c.Name = "" }, ErrNoName},
		{"no address", func(c *CoreConfig) { c.Addr = "" }, ErrNoAddr},
		{"no incarnation", func(c *CoreConfig) { c.Incarnation = 0 }, ErrNoIncarnation},
		{"negative lease", func(c *CoreConfig) { c.LeaseDuration = -time.Second }, ErrLeaseDuration},
		{"negative renew", func(c *CoreConfig) { c.RenewInterval = -time.Second }, ErrRenewInterval},
		{"renew = T", func(c *CoreConfig) { c.RenewInterval = c.LeaseDuration }, ErrRenewInterval},
		{"renew just under T", func(c *CoreConfig) { c.RenewInterval = c.LeaseDuration - 1 }, nil},
		{"T too short for T/4", func(c *CoreConfig) { c.LeaseDuration = 3 }, ErrRenewInterval},
		{"negative backoff", func(c *CoreConfig) { c.RaceBackoffMin = -1 }, ErrRaceBackoff},
		{"backoff max < min", func(c *CoreConfig) {
			c.RaceBackoffMin, c.RaceBackoffMax = 2*time.Second, time.Second
		}, ErrRaceBackoff},
		{"backoff max > renew", func(c *CoreConfig) { c.RaceBackoffMax = 16 * time.Second }, ErrRaceBackoff},
		{"backoff max = renew", func(c *CoreConfig) { c.RaceBackoffMax = 15 * time.Second }, nil},
		{"fixed backoff", func(c *CoreConfig) { c.RaceBackoffMin, c.RaceBackoffMax = time.Second, time.Second }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.mut(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("Validate() = %v, want %v", err, tc.want)
			}
			if _, nerr := NewCore(cfg); !errors.Is(nerr, tc.want) || (nerr == nil) != (tc.want == nil) {
				t.Errorf("NewCore() = %v, want %v", nerr, tc.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "ownerguard: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestNilRandIsSeededFromIncarnation(t *testing.T) {
	backoff := func(inc uint64) time.Duration {
		c := newCore(t, func(c *CoreConfig) { c.Rand = nil; c.Incarnation = inc })
		return c.backoff()
	}
	if a, b := backoff(7), backoff(7); a != b {
		t.Error("same incarnation, different backoff")
	}
	seen := map[time.Duration]bool{}
	for inc := range uint64(16) {
		seen[backoff(inc+1)] = true
	}
	if len(seen) < 8 {
		t.Errorf("16 incarnations gave only %d distinct backoffs", len(seen))
	}
}

// TestKeepaliveOutlastsRenewals: an Owner's gRPC keepalive pings only a
// connection that has been quiet for KeepaliveTime, and a live session
// hears the manager every renew interval. With KeepaliveTime equal to that
// interval (T/4 before) the responses, each a round trip after its
// request, came just after the keepalive's deadline, and most renewals
// cost the manager a ping and its answer besides. The default must leave
// a response a T/12 margin, and still drop a dead connection (keepalive
// and its timeout) before ResponseTimeout abandons the stream, where T
// is long enough for the keepalive not to sit at grpc-go's 10 s floor.
func TestKeepaliveOutlastsRenewals(t *testing.T) {
	for _, lease := range []time.Duration{8 * time.Second, 40 * time.Second, time.Minute, 5 * time.Minute} {
		c := OwnerConfig{LeaseDuration: lease}.withDefaults()
		renew := c.coreConfig(1).withDefaults().RenewInterval
		if c.KeepaliveTime < renew+lease/12 {
			t.Errorf("T=%v: keepalive after %v of quiet, renewals every %v: a live session pings", lease, c.KeepaliveTime, renew)
		}
		if lease/3 >= MinKeepaliveTime && c.KeepaliveTime+c.KeepaliveTimeout >= c.ResponseTimeout {
			t.Errorf("T=%v: a dead connection is dropped after %v, the stream abandoned after %v", lease, c.KeepaliveTime+c.KeepaliveTimeout, c.ResponseTimeout)
		}
	}
}
