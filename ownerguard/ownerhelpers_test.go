package ownerguard_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

const (
	defaultTestTimeout = 10 * time.Second
	testT              = time.Second // lease T: renewals every 250 ms
	testNS             = "ns"
)

// TestMain fails the run if an Owner leaves a goroutine behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := ownerGoroutines(defaultTestTimeout); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked Owner goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// ownerGoroutines waits up to d for every goroutine running Owner code to
// end, and returns the stacks of those left.
func ownerGoroutines(d time.Duration) string {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "fuge/ownerguard.(*") {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return ""
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return strings.Join(left, "\n\n")
		}
	}
}

// eventually waits until cond holds, waking on o's Updated channel (if o is
// not nil) and otherwise polling, and fails the test after the deadline.
func eventually(t testing.TB, o *ownerguard.Owner, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(defaultTestTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var upd <-chan struct{}
		if o != nil {
			upd = o.Updated() // before reading the state it guards
		}
		if cond() {
			return
		}
		select {
		case <-upd:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func waitReady(t testing.TB, o *ownerguard.Owner) {
	t.Helper()
	timer := time.NewTimer(defaultTestTimeout)
	defer timer.Stop()
	select {
	case <-o.Ready():
	case <-timer.C:
		t.Fatalf("owner not ready: stats %+v, err %v", o.Stats(), o.Err())
	}
}

// recorder keeps the ownership upcalls.
type recorder struct {
	mu    sync.Mutex
	calls [][2][]ring.Range
}

func (r *recorder) on(granted, revoked []ring.Range) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, [2][]ring.Range{granted, revoked})
}

func (r *recorder) all() (granted, revoked []ring.Range, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		granted = append(granted, c[0]...)
		revoked = append(revoked, c[1]...)
	}
	return granted, revoked, len(r.calls)
}

func (r *recorder) last() (granted, revoked []ring.Range) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil, nil
	}
	c := r.calls[len(r.calls)-1]
	return c[0], c[1]
}

// testLogger logs to t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newOwner creates and starts an owner; Close runs at cleanup.
func newOwner(t testing.TB, name string, managers []string, mut func(*ownerguard.OwnerConfig)) (*ownerguard.Owner, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg := ownerguard.OwnerConfig{
		Managers:      managers,
		Namespace:     testNS,
		Name:          name,
		Addr:          name + ":8080",
		LeaseDuration: testT,
		OnOwnership:   rec.on,
		Logger:        testLogger(t),
	}
	if mut != nil {
		mut(&cfg)
	}
	o, err := ownerguard.NewOwner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o, rec
}

// agrees reports whether o holds exactly what the manager has granted to
// name, under the same generations, and the manager's table is settled.
func agrees(f *fakeManager, o *ownerguard.Owner, name string) bool {
	want, settled := f.table(testNS, name)
	return settled && ring.Equal(heldTable(o.Held()), want)
}
