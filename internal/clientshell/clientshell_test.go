package clientshell

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestUpcallsOrderAndStopDrains(t *testing.T) {
	var u Upcalls[int]
	var got []int
	var running, overlap atomic.Int32
	release := make(chan struct{})
	u.Start(func(v int) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		if v == 0 {
			<-release // hold the goroutine so that the rest queue up
		}
		got = append(got, v)
	})
	const n = 100
	for i := range n {
		u.Push(i)
	}
	close(release)
	u.Stop() // must deliver everything queued before returning
	if len(got) != n {
		t.Fatalf("Stop returned after %d upcalls, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("upcall %d got %d, want in order: %v", i, v, got)
		}
	}
	if overlap.Load() != 0 {
		t.Errorf("upcalls overlapped %d times", overlap.Load())
	}
}

func TestUpcallsPushBeforeStart(t *testing.T) {
	var u Upcalls[string]
	u.Push("a")
	var got []string
	u.Start(func(s string) { got = append(got, s) })
	u.Push("b")
	u.Stop()
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("got %q, want [a b]", got)
	}
}

func TestUpcallsStopWithoutStart(t *testing.T) {
	var u Upcalls[int]
	u.Push(1)
	done := make(chan struct{})
	go func() { u.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop without Start blocked")
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: -1}.WithDefaults()
	for _, tc := range []struct {
		k    int
		want time.Duration
	}{
		{0, 50 * time.Millisecond}, {1, 100 * time.Millisecond}, {5, 1600 * time.Millisecond},
		{6, 2 * time.Second}, {31, 2 * time.Second}, {40, 2 * time.Second}, {1000, 2 * time.Second},
	} {
		if got := b.Delay(tc.k, 0.9); got != tc.want {
			t.Errorf("Delay(%d) = %v, want %v", tc.k, got, tc.want)
		}
	}
	j := Backoff{}.WithDefaults()
	if j != (Backoff{Base: DefaultBackoffBase, Max: DefaultBackoffMax, Jitter: DefaultBackoffJitter}) {
		t.Errorf("Backoff{}.WithDefaults() = %+v", j)
	}
	for k := range 40 {
		d := j.Max // 50ms·2^k reaches 2s at k = 6
		if k < 6 {
			d = j.Base << k
		}
		lo, hi := j.Delay(k, 0), j.Delay(k, 0.999999)
		wantLo, wantHi := time.Duration(float64(d)*0.8), time.Duration(float64(d)*1.2)
		if lo != wantLo || hi > wantHi || hi < wantHi-wantHi/1000 {
			t.Errorf("jittered Delay(%d) spans [%v, %v], want [%v, %v)", k, lo, hi, wantLo, wantHi)
		}
	}
}

func TestBackoffCheck(t *testing.T) {
	sentinel := errors.New("x: bad backoff")
	for _, tc := range []struct {
		b  Backoff
		ok bool
	}{
		{Backoff{}.WithDefaults(), true},
		{Backoff{Base: time.Second, Max: time.Second, Jitter: 1}, true},
		{Backoff{Base: time.Second, Max: time.Millisecond}, false},
		{Backoff{Base: 0, Max: time.Second}, false},
		{Backoff{Base: -1, Max: time.Second}, false},
		{Backoff{Base: 1, Max: 2, Jitter: 1.5}, false},
	} {
		err := tc.b.Check(sentinel)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, sentinel)) {
			t.Errorf("%+v.Check = %v, want ok=%v", tc.b, err, tc.ok)
		}
	}
}

func TestMonoClock(t *testing.T) {
	c := NewMonoClock()
	a := c.Now()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b := c.Now()
		if b.Before(a) {
			t.Fatalf("MonoClock went back from %v to %v", a, b)
		}
		if b.After(a) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MonoClock stayed at %v", a)
		}
	}
}

// TestMonoClockUnixNano: UnixNano reads the same clock as Now, so a read
// between two Now reads lies between their UnixNano values.
func TestMonoClockUnixNano(t *testing.T) {
	c := NewMonoClock()
	for range 1000 {
		a := c.Now().UnixNano()
		n := c.UnixNano()
		b := c.Now().UnixNano()
		if a > n || n > b {
			t.Fatalf("Now, UnixNano, Now read %d, %d, %d: not in order", a, n, b)
		}
	}
}
