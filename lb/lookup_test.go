package lb

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// quarters: a, b, c, d hold the four quarters of the circle at generations
// 1 to 4; d's arc wraps to 0.
var quarters = []lease.Entry{ent(0, q, "a", 1), ent(q, 2*q, "b", 2), ent(2*q, 3*q, "c", 3), ent(3*q, 0, "d", 4)}

type lossCall struct {
	ranges []ring.Range
	all    bool
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// startLookup starts a Lookup of namespace ns on managers; its loss upcalls
// arrive on the channel. mut adjusts the config.
func startLookup(t *testing.T, managers []string, mut func(*LookupConfig)) (*Lookup, chan lossCall) {
	t.Helper()
	losses := make(chan lossCall, 64)
	cfg := LookupConfig{
		Managers:  managers,
		Namespace: ns,
		Name:      "fe1",
		OnLoss:    func(rs []ring.Range, all bool) { losses <- lossCall{slices.Clone(rs), all} },
		Backoff:   BackoffConfig{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:    slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mut != nil {
		mut(&cfg)
	}
	l, err := NewLookup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, losses
}

func waitReady(t *testing.T, l *Lookup) {
	t.Helper()
	select {
	case <-l.Ready():
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out waiting for the first table")
	}
}

func waitLoss(t *testing.T, losses chan lossCall) lossCall {
	t.Helper()
	select {
	case c := <-losses:
		return c
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out waiting for a loss upcall")
		return lossCall{}
	}
}

func noLoss(t *testing.T, losses chan lossCall) {
	t.Helper()
	select {
	case c := <-losses:
		t.Fatalf("unexpected loss upcall %v all=%v", c.ranges, c.all)
	default:
	}
}

func checkLoss(t *testing.T, got lossCall, all bool, want ...ring.Range) {
	t.Helper()
	if got.all != all || !slices.Equal(got.ranges, want) {
		t.Fatalf("loss = %v all=%v, want %v all=%v", got.ranges, got.all, want, all)
	}
}

// checkAt checks what Lookup says at h.
func checkAt(t *testing.T, l *Lookup, h uint64, want lease.Entry) {
	t.Helper()
	addr, r, gen, ok := l.Lookup(h)
	if addr != want.Addr || r != want.Range || gen != want.Gen || ok != (want.Owner != "") {
		t.Fatalf("Lookup(%x) = %q %v %d %v, want %v", h, addr, r, gen, ok, want)
	}
}

func TestXDSInitialTable(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	if _, _, _, ok := l.Lookup(1); ok && l.Version() == 0 {
		t.Fatal("Lookup answered before any table")
	}
	waitReady(t, l)
	srv.waitAcked(ArcTypeURL, 1)
	srv.waitAcked(HeartbeatTypeURL, 1)

	want := []lease.Entry{quarters[3], quarters[0], quarters[1], quarters[2]} // in order of End
	if got := l.Entries(); !slices.Equal(got, want) {
		t.Fatalf("Entries = %v, want %v", got, want)
	}
	for _, e := range quarters {
		checkAt(t, l, e.Range.Start+1, e)
		checkAt(t, l, e.Range.End, e)
	}
	a1, r1, g1, ok1 := l.LookupKey("alice")
	a2, r2, g2, ok2 := l.Lookup(ring.HashString("alice"))
	if a1 != a2 || r1 != r2 || g1 != g2 || ok1 != ok2 {
		t.Fatalf("LookupKey and Lookup disagree")
	}
	if v, st := l.Version(), l.Stats(); v != 1 || st.Updates != 1 || st.Attempts != 1 || st.NACKs != 0 {
		t.Fatalf("Version %d, stats %+v", v, st)
	}
	noLoss(t, losses) // the first table notifies nothing

	recs := srv.records()
	var subs, acks int
	for _, r := range recs {
		switch req := r.req; {
		case req == nil:
		case req.ResponseNonce == "":
			subs++
			md := req.GetNode().GetMetadata().GetFields()[NamespaceMetadataKey].GetStringValue()
			if req.GetNode().GetId() != "fe1" || req.GetNode().GetCluster() != ns || md != ns ||
				!slices.Equal(req.ResourceNamesSubscribe, []string{"*"}) || len(req.InitialResourceVersions) != 0 {
				t.Errorf("subscription %v", req)
			}
		case req.ErrorDetail != nil:
			t.Errorf("NACK %v", req)
		default:
			acks++
		}
	}
	if subs != 2 || acks < 2 {
		t.Fatalf("server saw %d subscriptions and %d ACKs, want 2 and at least 2", subs, acks)
	}
}

func TestXDSUpdateNotifiesLoss(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)

	up := l.Updated()
	srv.update([]lease.Entry{ent(q, 2*q, "b", 5)})
	checkLoss(t, waitLoss(t, losses), false, rg(q, 2*q))
	select {
	case <-up:
	default:
		t.Fatal("Updated not closed by the update")
	}
	checkAt(t, l, q+1, ent(q, 2*q, "b", 5))
	checkAt(t, l, 3*q, quarters[2])
	if v := l.Version(); v != 2 {
		t.Fatalf("Version = %d, want 2", v)
	}

	// c's arc splits: its first half under a new generation, its second
	// half moves to e under the same generation (no loss there).
	srv.update([]lease.Entry{ent(2*q, 2*q+q/2, "c", 6), ent(2*q+q/2, 3*q, "e", 3)}, rg(2*q, 3*q))
	checkLoss(t, waitLoss(t, losses), false, rg(2*q, 2*q+q/2))
	checkAt(t, l, 3*q, ent(2*q+q/2, 3*q, "e", 3))
	checkAt(t, l, 2*q+1, ent(2*q, 2*q+q/2, "c", 6))
	if st := l.Stats(); st.LossNotifications != 2 || st.LossAll != 0 || st.Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestXDSReconnectSendsVersions(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)
	srv.waitAcked(ArcTypeURL, 1)
	held := map[string]string{}
	for _, r := range srv.records() {
		if r.resp != nil && r.resp.TypeUrl == ArcTypeURL {
			for _, res := range r.resp.Resources {
				held[res.Name] = res.Version
			}
		}
	}
	if len(held) != 4 {
		t.Fatalf("server sent %d arcs, want 4", len(held))
	}

	srv.stop()
	srv.update([]lease.Entry{ent(3*q, 0, "d", 9)}) // while the Lookup is cut off
	srv.start()
	checkLoss(t, waitLoss(t, losses), false, rg(3*q, 0))
	checkAt(t, l, 3*q+1, ent(3*q, 0, "d", 9))

	recs := lastStream(srv.records())
	var first, resp bool
	for _, r := range recs {
		switch {
		case r.req != nil && r.req.TypeUrl == ArcTypeURL && !first:
			first = true
			if !maps.Equal(r.req.InitialResourceVersions, held) {
				t.Errorf("initial_resource_versions = %v, want %v", r.req.InitialResourceVersions, held)
			}
		case r.resp != nil && r.resp.TypeUrl == ArcTypeURL && !resp:
			resp = true
			if len(r.resp.Resources) != 1 || r.resp.Resources[0].Name != wire.ArcName(ns, rg(3*q, 0)) {
				t.Errorf("first response after reconnecting sent %d arcs, want only d's: %v", len(r.resp.Resources), r.resp)
			}
		}
	}
	if !first || !resp {
		t.Fatalf("the new stream has no Arc request or response: %v", recs)
	}
	if st := l.Stats(); st.Reconnects == 0 || st.Redirects != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestXDSFollowsLeaderTrailer(t *testing.T) {
	leader := newXDSServer(t, ns, quarters...)
	standby := newXDSServer(t, ns)
	standby.standby(leader.Addr())
	// The leader is not in the list: only the trailer leads there.
	l, _ := startLookup(t, []string{standby.Addr()}, nil)
	waitReady(t, l)
	if st := l.Stats(); st.Redirects != 1 || st.Attempts != 2 {
		t.Fatalf("stats %+v, want 1 redirect in 2 attempts", st)
	}
	standby.wait("the refused stream", func(log []record, opens int) bool { return opens > 0 })
	if n := len(standby.records()); n != 0 {
		t.Fatalf("standby processed %d messages", n)
	}
	checkAt(t, l, q, quarters[0])
}

func TestXDSRotatesWithoutLeader(t *testing.T) {
	standby := newXDSServer(t, ns)
	standby.standby("") // no leader known
	leader := newXDSServer(t, ns, quarters...)
	l, _ := startLookup(t, []string{standby.Addr(), leader.Addr()}, nil)
	waitReady(t, l)
	if st := l.Stats(); st.Redirects != 0 || st.Attempts < 2 {
		t.Fatalf("stats %+v, want no redirect", st)
	}
	standby.wait("the refused stream", func(log []record, opens int) bool { return opens > 0 })
}

func TestXDSAbandonsSilentStream(t *testing.T) {
	fc := newFakeClock(t0)
	silent := newXDSServer(t, ns)
	silent.hangStreams()
	leader := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{silent.Addr(), leader.Addr()}, func(c *LookupConfig) {
		c.Clock = fc
		c.StreamTimeout = 5 * time.Second
	})
	silent.wait("the stream", func(log []record, opens int) bool { return opens > 0 })
	if next := fc.waitSettled(t); !next.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("timer armed for %v, want the stream timeout at 5s", next.Sub(t0))
	}
	select {
	case <-l.Ready():
		t.Fatal("ready before the silent stream was abandoned")
	default:
	}
	fc.Advance(5 * time.Second)
	waitReady(t, l)
	if st := l.Stats(); st.Stalls != 1 || st.Attempts != 2 || st.LossAll != 0 {
		t.Fatalf("stats %+v, want 1 stall in 2 attempts", st)
	}
	noLoss(t, losses)
}

func TestXDSStaleness(t *testing.T) {
	const bound = 10 * time.Second
	fc := newFakeClock(t0)
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, func(c *LookupConfig) {
		c.Clock = fc
		c.StalenessBound = bound
		c.StreamTimeout = -1
	})
	waitReady(t, l)
	srv.waitAcked(ArcTypeURL, 1)
	srv.waitAcked(HeartbeatTypeURL, 1)

	// A heartbeat at 9 s refreshes the staleness clock: nothing at 11 s.
	hb := l.Stats().Heartbeats
	fc.Advance(9 * time.Second)
	fc.waitSettled(t)
	n := srv.sent(HeartbeatTypeURL)
	srv.heartbeat()
	srv.waitAcked(HeartbeatTypeURL, n+1)
	if got := l.Stats().Heartbeats; got != hb+1 {
		t.Fatalf("heartbeats %d, want %d", got, hb+1)
	}
	fc.Advance(2 * time.Second)
	fc.waitSettled(t)
	if st := l.Stats(); st.LossAll != 0 {
		t.Fatalf("loss on everything 11 s after the table, 2 s after a heartbeat: %+v", st)
	}
	noLoss(t, losses)

	// The manager goes away: nothing until the bound, then loss on all.
	srv.stop()
	fc.Advance(bound - 2*time.Second - time.Millisecond)
	fc.waitSettled(t)
	if st := l.Stats(); st.LossAll != 0 {
		t.Fatalf("loss on everything before the bound: %+v", st)
	}
	fc.Advance(time.Millisecond)
	checkLoss(t, waitLoss(t, losses), true, ring.Full())
	if st := l.Stats(); st.LossAll != 1 || st.LossNotifications != 1 {
		t.Fatalf("stats %+v", st)
	}
	checkAt(t, l, q, quarters[0]) // the table stays as a hint

	// It comes back with c's arc lost meanwhile: the next table notifies it.
	srv.update([]lease.Entry{ent(2*q, 3*q, "c", 8)})
	srv.start()
	checkLoss(t, waitLoss(t, losses), false, rg(2*q, 3*q))
}

func TestXDSNACK(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)

	// One push: d under a new generation, and a b held without an address.
	bad := wire.ArcName(ns, rg(q, 2*q))
	push := srv.arcResources([]lease.Entry{ent(3*q, 0, "d", 9)})
	push[bad] = &fugev1.Arc{Namespace: ns, Range: wire.Range(rg(q, 2*q)), Owner: "x", Gen: 7}
	if err := srv.arcs.UpdateResources(push, nil); err != nil {
		t.Fatal(err)
	}
	srv.wait("a NACK", func(log []record, _ int) bool {
		for _, r := range log {
			if r.req != nil && r.req.ErrorDetail != nil {
				return true
			}
		}
		return false
	})
	for _, r := range srv.records() {
		if r.req == nil || r.req.ErrorDetail == nil {
			continue
		}
		if !strings.Contains(r.req.ErrorDetail.Message, bad) || r.req.TypeUrl != ArcTypeURL {
			t.Errorf("NACK %v does not name %q", r.req, bad)
		}
		var nacked bool
		for _, s := range srv.records() {
			nacked = nacked || (s.stream == r.stream && s.resp != nil && s.resp.Nonce == r.req.ResponseNonce &&
				slices.ContainsFunc(s.resp.Resources, func(x *discovery.Resource) bool { return x.Name == bad }))
		}
		if !nacked {
			t.Errorf("NACK %v answers no response carrying %q", r.req, bad)
		}
	}
	// Nothing of the refused response was applied.
	checkAt(t, l, q+1, quarters[1])
	checkAt(t, l, 3*q+1, quarters[3])
	noLoss(t, losses)
	if st := l.Stats(); st.NACKs == 0 || st.Updates != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Fixed: the resynchronized stream applies both changes at once.
	srv.update([]lease.Entry{ent(q, 2*q, "b", 7)})
	checkLoss(t, waitLoss(t, losses), false, rg(3*q, 0), rg(q, 2*q))
	checkAt(t, l, q+1, ent(q, 2*q, "b", 7))
	checkAt(t, l, 3*q+1, ent(3*q, 0, "d", 9))
}

func TestLookupConfigValidate(t *testing.T) {
	ok := LookupConfig{Managers: []string{"127.0.0.1:1"}, Namespace: ns}
	tests := []struct {
		name string
		mut  func(*LookupConfig)
		want error
	}{
		{"ok", func(*LookupConfig) {}, nil},
		{"no managers", func(c *LookupConfig) { c.Managers = nil }, ErrNoManagers},
		{"empty manager", func(c *LookupConfig) { c.Managers = []string{""} }, ErrNoManagers},
		{"no namespace", func(c *LookupConfig) { c.Namespace = "" }, ErrNoNamespace},
		{"negative bound", func(c *LookupConfig) { c.StalenessBound = -time.Second }, ErrStalenessBound},
		{"backoff", func(c *LookupConfig) { c.Backoff = BackoffConfig{Base: time.Second, Max: time.Millisecond} }, ErrBackoff},
	}
	for _, tt := range tests {
		c := ok
		tt.mut(&c)
		if err := c.Validate(); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("%s: Validate = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestLookupStartClose(t *testing.T) {
	l, err := NewLookup(LookupConfig{Managers: []string{"127.0.0.1:1"}, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	if l.Entries() != nil || l.Version() != 0 {
		t.Fatal("a Lookup that never connected has a table")
	}
}

// published returns a Lookup (not started) publishing a core's n-arc table.
func published(tb testing.TB, n int) (*Lookup, *Core) {
	c := bigCore(tb, n)
	l, err := NewLookup(LookupConfig{Managers: []string{"127.0.0.1:1"}, Namespace: ns})
	if err != nil {
		tb.Fatal(err)
	}
	l.publish(c.Entries(), c.Stats())
	return l, c
}

func TestPublishedLookupMatchesCore(t *testing.T) {
	l, c := published(t, 1024)
	h := uint64(0x9e3779b97f4a7c15)
	for range 20000 {
		h = h*6364136223846793005 + 1442695040888963407
		a1, r1, g1, ok1 := l.Lookup(h)
		a2, r2, g2, ok2 := c.Lookup(h)
		if a1 != a2 || r1 != r2 || g1 != g2 || ok1 != ok2 {
			t.Fatalf("Lookup(%x) = %q %v %d %v, core says %q %v %d %v", h, a1, r1, g1, ok1, a2, r2, g2, ok2)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() { l.Lookup(0x0123456789abcdef) })
	if allocs != 0 {
		t.Fatalf("Lookup allocates %v times", allocs)
	}
}

func BenchmarkPublishedLookup(b *testing.B) {
	l, _ := published(b, 4096)
	b.ReportAllocs()
	var h uint64 = 0x9e3779b97f4a7c15
	for b.Loop() {
		h = h*6364136223846793005 + 1442695040888963407
		if _, _, _, ok := l.Lookup(h); !ok {
			b.Fatal("free")
		}
	}
}
