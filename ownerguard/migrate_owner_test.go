package ownerguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fuge-project/fuge/fugetls"
	"github.com/fuge-project/fuge/internal/fugetest"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// migT is long, so that nothing in these tests can pass for a migration by
// expiring: a lease held by a drained owner would outlive the test.
const migT = 20 * time.Second

// kvStore is a toy application: key hash -> value, migrated as lines
// "hash value". It checks the Owner API's promises as it is called: an
// export only after its owner stopped serving the range, an import only
// before its owner serves it.
type kvStore struct {
	owner atomic.Pointer[ownerguard.Owner]
	fail  atomic.Bool // Import fails

	mu         sync.Mutex
	data       map[uint64]string
	violations []string
	exports    int
	imports    int
}

func newKV() *kvStore { return &kvStore{data: map[uint64]string{}} }

func (s *kvStore) put(k uint64, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[k] = v
}

func (s *kvStore) get(k uint64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[k]
	return v, ok
}

func (s *kvStore) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *kvStore) Export(_ context.Context, r ring.Range, _ lease.Gen, w io.Writer) error {
	o := s.owner.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exports++
	for k, v := range s.data {
		if !r.Contains(k) {
			continue
		}
		if _, held := o.GetOwnershipHandle(k); held {
			s.violations = append(s.violations, fmt.Sprintf("exported %016x while still serving it", k))
		}
		if _, err := fmt.Fprintf(w, "%d %s\n", k, v); err != nil {
			return err
		}
	}
	return nil
}

func (s *kvStore) Import(_ context.Context, r ring.Range, _ lease.Gen, rd io.Reader) error {
	if s.fail.Load() {
		return errors.New("kvStore: import refused")
	}
	o := s.owner.Load()
	got := map[uint64]string{}
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		h, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || !r.Contains(h) {
			return fmt.Errorf("kvStore: bad line %q", sc.Text())
		}
		if _, held := o.GetOwnershipHandle(h); held {
			s.violate("importing %016x while already serving it", h)
		}
		got[h] = v
	}
	if err := sc.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imports++
	for k, v := range got {
		s.data[k] = v
	}
	return nil
}

// migOwner starts an Owner with migration over mutual TLS, its store, and
// the revocations its upcall heard.
func migOwner(t *testing.T, m *fugetest.Manager, name, addr string, kv *kvStore, revoked *atomic.Int64) *ownerguard.Owner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	id := fugetls.OwnerID(m.NS, name)
	o, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers: []string{m.GRPCAddr}, Namespace: m.NS, Name: name, Addr: addr,
		LeaseDuration: m.T, DialOptions: m.DialOptions(t, id),
		OnOwnership: func(_, r []ring.Range) { revoked.Add(int64(len(r))) },
		Migration:   &ownerguard.MigrationConfig{Migrator: kv, Listener: ln, TLS: m.Source(t, id)},
	})
	if err != nil {
		t.Fatal(err)
	}
	kv.owner.Store(o)
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	fugetest.Wait(t, "owner "+name+" ready", o.Ready())
	return o
}

type migPool struct {
	m        *fugetest.Manager
	a, b     *ownerguard.Owner
	kvA, kvB *kvStore
	losses   atomic.Int64
	keys     []uint64
	// importsBefore: b's counters once the pool settled (its share came
	// from a by migration too).
	importsBefore ownerguard.MigrationCounters
}

// startMigPool starts a manager with TLS, owners a and b with migration,
// a lookup counting loss notifications, and writes keys to whoever holds
// them.
func startMigPool(t *testing.T) *migPool {
	p := &migPool{kvA: newKV(), kvB: newKV()}
	p.m = fugetest.StartManager(t, fugetest.Options{T: migT, TLS: true, RingSize: 64})
	var ra, rb atomic.Int64
	p.a = migOwner(t, p.m, "a", "127.0.0.1:1", p.kvA, &ra)
	p.b = migOwner(t, p.m, "b", "127.0.0.1:2", p.kvB, &rb)
	l := p.m.Lookup(t, "l", func(rs []ring.Range, all bool) { p.losses.Add(int64(len(rs))) })
	p.m.Settled(t, l, "a", "b")
	rnd := rand.New(rand.NewPCG(14, 3))
	for range 300 {
		p.keys = append(p.keys, rnd.Uint64())
	}
	// b's arcs came from a, by migration (there was nothing to move):
	// served once imported.
	fugetest.Eventually(t, "every arc served by its owner, imports done", func() bool {
		for _, e := range l.Entries() {
			o := map[string]*ownerguard.Owner{"a": p.a, "b": p.b}[e.Owner]
			if o == nil {
				return false
			}
			if h, ok := o.GetOwnershipHandle(e.Range.End); !ok || h.Gen != e.Gen {
				return false
			}
		}
		for _, k := range p.keys {
			if held(p.a, k) == held(p.b, k) {
				return false
			}
		}
		return true
	})
	p.importsBefore = p.b.Stats().Migration
	for i, k := range p.keys {
		switch {
		case held(p.a, k):
			p.kvA.put(k, "v"+strconv.Itoa(i))
		case held(p.b, k):
			p.kvB.put(k, "v"+strconv.Itoa(i))
		default:
			t.Fatalf("nobody serves %016x", k)
		}
	}
	p.losses.Store(0) // the first table notifies nothing, but be exact
	return p
}

func held(o *ownerguard.Owner, k uint64) bool { _, ok := o.GetOwnershipHandle(k); return ok }

func (p *migPool) drain(t *testing.T, name string) {
	t.Helper()
	resp, err := p.m.AdminClient().Post(p.m.AdminURL("/v1/namespaces/"+p.m.NS+"/owners/"+name+"/drain"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("drain: %s", resp.Status)
	}
}

// TestMigrationDrainMovesState drains a: b serves every key afterwards,
// with a's values, and no lookup hears of a loss; a exported only after it
// stopped serving, b imported before it served.
func TestMigrationDrainMovesState(t *testing.T) {
	p := startMigPool(t)
	want := map[uint64]string{}
	for _, k := range p.keys {
		if v, ok := p.kvA.get(k); ok {
			want[k] = v
		}
	}
	p.drain(t, "a")
	fugetest.Eventually(t, "b to serve every key", func() bool {
		for _, k := range p.keys {
			if !held(p.b, k) {
				return false
			}
		}
		return true
	})
	fugetest.Eventually(t, "a's exports to end", func() bool { return p.a.Stats().Migration.Exports > 0 && len(p.a.Held()) == 0 })
	for k, v := range want {
		if got, ok := p.kvB.get(k); !ok || got != v {
			t.Errorf("key %016x: b has %q (%v), a had %q", k, got, ok, v)
		}
	}
	if n := p.losses.Load(); n != 0 {
		t.Errorf("%d loss notifications for a migrated drain", n)
	}
	for _, kv := range []*kvStore{p.kvA, p.kvB} {
		for _, v := range kv.violations {
			t.Error(v)
		}
	}
	st := p.b.Stats().Migration
	if st.Imports == p.importsBefore.Imports || st.ImportsFailed != 0 || st.ImportBytes == 0 {
		t.Errorf("b's migration counters %+v", st)
	}
	t.Logf("a: %+v; b: %+v", p.a.Stats().Migration, st)
}

// TestMigrationImportFailureNotifiesLoss: b's application refuses every
// import; the ranges are handed over plainly, with a loss notification,
// and b serves them all the same, without the state.
func TestMigrationImportFailureNotifiesLoss(t *testing.T) {
	p := startMigPool(t)
	p.kvB.fail.Store(true)
	p.drain(t, "a")
	fugetest.Eventually(t, "b to serve every key", func() bool {
		for _, k := range p.keys {
			if !held(p.b, k) {
				return false
			}
		}
		return true
	})
	fugetest.Eventually(t, "lookups to hear of the loss", func() bool { return p.losses.Load() > 0 })
	if st := p.b.Stats().Migration; st.ImportsFailed == p.importsBefore.ImportsFailed || st.Imports != p.importsBefore.Imports {
		t.Errorf("b's migration counters %+v, before the drain %+v", st, p.importsBefore)
	}
	for _, k := range p.keys {
		if _, ok := p.kvA.get(k); ok {
			if _, ok := p.kvB.get(k); ok {
				t.Errorf("key %016x reached b through a failed import", k)
			}
		}
	}
}

// TestMigrationCloseHandsOver: a's Close hands its ranges to b with their
// state before leaving.
func TestMigrationCloseHandsOver(t *testing.T) {
	p := startMigPool(t)
	n := 0
	for _, k := range p.keys {
		if _, ok := p.kvA.get(k); ok {
			n++
		}
	}
	start := time.Now()
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v; a: %+v", time.Since(start), p.a.Stats().Migration)
	fugetest.Eventually(t, "b to serve every key", func() bool {
		for _, k := range p.keys {
			if !held(p.b, k) {
				return false
			}
		}
		return true
	})
	moved := 0
	for _, k := range p.keys {
		if v, ok := p.kvA.get(k); ok {
			if got, _ := p.kvB.get(k); got == v {
				moved++
			}
		}
	}
	if moved != n || n == 0 {
		t.Errorf("%d of a's %d keys reached b; b's migration counters %+v, before the handover %+v", moved, n, p.b.Stats().Migration, p.importsBefore)
	}
	if l := p.losses.Load(); l != 0 {
		t.Errorf("%d loss notifications after a handover", l)
	}
}
