package ratelimit

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const sec = int64(time.Second)

func newLimiter(t testing.TB, l Limit, registered int) *Limiter {
	t.Helper()
	lim, err := NewLimiter(l, registered)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// admitted counts the admitted requests of n evenly spaced over d from
// start.
func admitted(l *Limiter, key string, start, d int64, n int) int {
	ok := 0
	for i := range n {
		if l.Allow([]byte(key), start+d*int64(i)/int64(n)).Allowed {
			ok++
		}
	}
	return ok
}

func TestBucketRateAndBurst(t *testing.T) {
	// One limiter registered alone gets the whole limit: 100 per 10 s with
	// a burst of 20.
	l := newLimiter(t, Limit{Name: "a", Requests: 100, Period: 10 * time.Second, Burst: 20}, 1)
	if got := admitted(l, "k", 0, 1, 50); got != 20 {
		t.Fatalf("a burst of 50 at once admitted %d, want the burst 20", got)
	}
	// Then 10 per second: after a second the bucket holds 10 tokens, and
	// 100 seconds of 1,000 requests a second admit those and 1,000 more,
	// give or take one.
	got := admitted(l, "k", sec, 100*sec, 100_000)
	if got < 1009 || got > 1011 {
		t.Fatalf("100 s at 10/s admitted %d, want 1010", got)
	}
	l.Allow([]byte("k"), 101*sec)
	d := l.Allow([]byte("k"), 101*sec)
	if d.Allowed || !d.Limited || d.Reset <= 0 || d.Reset > 100*time.Millisecond || d.Quota != 100 || d.Window != 10 {
		t.Fatalf("over the limit: %+v", d)
	}
}

func TestPanicShareAndOverrides(t *testing.T) {
	// Registered 4: a fresh key starts at L/4; an override changes L.
	l := newLimiter(t, Limit{Name: "a", Requests: 400, Burst: 4, Overrides: map[string]float64{"big": 4000}}, 4)
	// Bursts are L's share too: 4/4 = 1 token, raised to minBurst 2;
	// 4 x 4000/400 / 4 = 10 tokens for the override.
	if got := admitted(l, "k", 0, 10*sec, 10_000); got < 1000 || got > 1002 {
		t.Fatalf("10 s at L/4 = 100/s admitted %d, want 1000 and the burst", got)
	}
	if got := admitted(l, "big", 0, 10*sec, 100_000); got < 10_000 || got > 10_010 {
		t.Fatalf("override 4000/4 for 10 s admitted %d, want 10000 and the burst", got)
	}
}

func TestShadowCountsOnly(t *testing.T) {
	l := newLimiter(t, Limit{Name: "a", Requests: 1, Burst: 1, Mode: Shadow}, 1)
	limited := 0
	for i := range 10 {
		d := l.Allow([]byte("k"), int64(i))
		if !d.Allowed {
			t.Fatal("shadow mode refused a request")
		}
		if d.Limited {
			limited++
		}
	}
	if limited != 8 { // a burst of minBurst = 2
		t.Fatalf("limited %d of 10, want 8", limited)
	}
}

func TestMaxKeysOverflow(t *testing.T) {
	l := newLimiter(t, Limit{Name: "a", Requests: 10, MaxKeys: 100}, 1)
	for i := range 1000 {
		l.Allow([]byte("k"+strconv.Itoa(i)), 0)
	}
	if n := l.Keys(); n != 100 {
		t.Fatalf("tracked %d keys, want MaxKeys 100", n)
	}
	// The keys beyond share one bucket: a burst of 10 in all.
	if got := admitted(l, "other", 0, 1, 100); got != 0 {
		t.Fatalf("overflow bucket admitted %d after 900 keys spent it, want 0", got)
	}
	if got := admitted(l, "k5", 0, 1, 100); got != 9 {
		t.Fatalf("a tracked key admitted %d of its burst 10 (one spent), want 9", got)
	}
}

func TestAllowConcurrent(t *testing.T) {
	l := newLimiter(t, Limit{Name: "a", Requests: 1000, Burst: 1000}, 1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for g := range 8 {
		wg.Go(func() {
			ok := 0
			for i := range 2000 {
				if l.Allow([]byte("k"+strconv.Itoa(i%300)), 0).Allowed {
					ok++
				}
			}
			_ = g
			mu.Lock()
			total += ok
			mu.Unlock()
		})
	}
	wg.Wait()
	// 300 keys, 1,000 tokens each at t=0, 16,000 requests: each admitted
	// exactly once per request, no key lost while the table grew.
	if total != 16_000 || l.Keys() != 300 {
		t.Fatalf("admitted %d of 16000, %d keys", total, l.Keys())
	}
	var arrivals uint64
	l.each(func(k *keyState) { arrivals += k.arrivals.Load() })
	if arrivals != 16_000 {
		t.Fatalf("counted %d arrivals, want 16000", arrivals)
	}
}

func TestLimitValidate(t *testing.T) {
	good := Limit{Name: "tenant-api", Requests: 1000, Period: time.Second, Burst: 200}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		mod   func(*Limit)
	}{
		{"name", func(l *Limit) { l.Name = "" }},
		{"name", func(l *Limit) { l.Name = "a b" }},
		{"requests", func(l *Limit) { l.Requests = 0 }},
		{"requests", func(l *Limit) { l.Requests = math.NaN() }},
		{"period", func(l *Limit) { l.Period = time.Microsecond }},
		{"period", func(l *Limit) { l.Period = 48 * time.Hour }},
		{"burst", func(l *Limit) { l.Burst = 1e9 }},
		{"mode", func(l *Limit) { l.Mode = "maybe" }},
		{"on_no_view", func(l *Limit) { l.OnNoView = "panic" }},
		{"max_keys", func(l *Limit) { l.MaxKeys = -1 }},
		{"max_keys", func(l *Limit) { l.MaxKeys = 2_000_000 }},
		{"overrides", func(l *Limit) { l.Overrides = map[string]float64{"": 1} }},
		{"overrides", func(l *Limit) { l.Overrides = map[string]float64{"x": -1} }},
	} {
		l := good
		tc.mod(&l)
		err := l.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %v does not name %s", l, err, tc.field)
		}
		if _, err := NewLimiter(l, 1); err == nil {
			t.Errorf("NewLimiter accepted %+v", l)
		}
	}
}

// BenchmarkAllow is the admission check on the proxy's hot path: a key
// already tracked, from every core at once on distinct keys, and on one
// shared key. It must report 0 allocs/op.
func BenchmarkAllow(b *testing.B) {
	l := newLimiter(b, Limit{Name: "a", Requests: 1e9, Burst: 1e9}, 1)
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = []byte("tenant-" + strconv.Itoa(i))
		l.Allow(keys[i], 0)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		now := int64(0)
		for i := 0; b.Loop(); i++ {
			now += 1000
			l.Allow(keys[i&63], now)
		}
	})
	b.Run("parallel-distinct", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				l.Allow(keys[i&63], int64(i))
			}
		})
	})
	b.Run("parallel-one-key", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				l.Allow(keys[0], int64(i))
			}
		})
	})
}
