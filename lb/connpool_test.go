package lb

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
)

// TestConnPoolSharesConnections runs three Lookups on a pool of two
// streams per connection: each has a stream of its own (the server sees
// three opens) and follows the table, on two connections; the last stream
// to end closes the pool's last connection.
func TestConnPoolSharesConnections(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	pool, err := NewConnPool(2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var ls []*Lookup
	for range 3 {
		l, _ := startLookup(t, []string{srv.Addr()}, func(c *LookupConfig) { c.Conns = pool })
		ls = append(ls, l)
	}
	for _, l := range ls {
		waitReady(t, l)
		checkAt(t, l, 1, quarters[0])
	}
	srv.wait("three streams", func(_ []record, opens int) bool { return opens == 3 })
	if n := pool.Conns(); n != 2 {
		t.Fatalf("pool has %d connections for 3 streams of at most 2 each, want 2", n)
	}
	// A change reaches every stream.
	moved := ent(0, q, "e", 5)
	srv.setTable(replaced(quarters, 0, moved)...)
	for _, l := range ls {
		waitGen(t, l, 1, 5)
	}
	for _, l := range ls {
		l.Close()
	}
	if n := pool.Conns(); n != 0 {
		t.Fatalf("pool has %d connections after every stream ended, want 0", n)
	}
}

func TestConnPoolClosed(t *testing.T) {
	pool, err := NewConnPool(0)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if _, _, err := pool.get("127.0.0.1:1"); err != ErrPoolClosed {
		t.Fatalf("get on a closed pool: %v, want ErrPoolClosed", err)
	}
	if _, err := NewConnPool(-1); err == nil {
		t.Fatal("NewConnPool(-1) succeeded")
	}
}

// waitGen waits until l's arc at h has generation gen.
func waitGen(t *testing.T, l *Lookup, h uint64, gen lease.Gen) {
	t.Helper()
	deadline := time.After(defaultTestTimeout)
	for {
		up := l.Updated()
		if _, _, g, _ := l.Lookup(h); g == gen {
			return
		}
		select {
		case <-up:
		case <-deadline:
			t.Fatalf("timed out waiting for generation %d at %x", gen, h)
		}
	}
}
