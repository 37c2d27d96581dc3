package lb

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

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
		InOrder:   true, // the tests say which manager is tried first
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

// replaced returns es with es[i] replaced by with.
func replaced(es []lease.Entry, i int, with ...lease.Entry) []lease.Entry {
	return slices.Concat(es[:i], with, es[i+1:])
}

// blockResponses returns the ArcBlock responses among recs.
func blockResponses(recs []record) []*discovery.DeltaDiscoveryResponse {
	var out []*discovery.DeltaDiscoveryResponse
	for _, r := range recs {
		if r.resp != nil && r.resp.TypeUrl == ArcBlockTypeURL {
			out = append(out, r.resp)
		}
	}
	return out
}

// resourceNames lists the names of the resources of resps, in order.
func resourceNames(resps []*discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, r := range resps {
		for _, res := range r.Resources {
			out = append(out, res.Name)
		}
	}
	return out
}

func TestXDSInitialTable(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	if _, _, _, ok := l.Lookup(1); ok && l.Version() == 0 {
		t.Fatal("Lookup answered before any table")
	}
	waitReady(t, l)
	srv.waitAcked(ArcBlockTypeURL, 1)
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
	if v, st := l.Version(), l.Stats(); v != 1 || st.Updates != 1 || st.Attempts != 1 || st.NACKs != 0 || st.Rejected != 0 {
		t.Fatalf("Version %d, stats %+v", v, st)
	}
	noLoss(t, losses) // the first table notifies nothing

	recs := srv.records()
	var types []string
	var acks int
	for _, r := range recs {
		switch req := r.req; {
		case req == nil:
		case req.ResponseNonce == "":
			types = append(types, req.TypeUrl)
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
	if !slices.Equal(types, []string{ArcBlockTypeURL, HeartbeatTypeURL}) || acks < 2 {
		t.Fatalf("server saw subscriptions to %v and %d ACKs, want ArcBlock and Heartbeat and at least 2", types, acks)
	}
	if n := len(resourceNames(blockResponses(recs))); n != testBlocks {
		t.Fatalf("server sent %d blocks, want %d", n, testBlocks)
	}
}

// A table that arrives incomplete, missing a block or with arcs that do not
// partition the circle, is acknowledged and waits.
func TestXDSWaitsForCompleteTable(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	a := wire.BlockOf(quarters[0].Range.End, testBits) // a's block
	srv.publish(nil, a)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	srv.waitAcked(ArcBlockTypeURL, 1)
	if got := len(resourceNames(blockResponses(srv.records()))); got != testBlocks-1 {
		t.Fatalf("server sent %d blocks, want %d", got, testBlocks-1)
	}
	notReady := func() {
		t.Helper()
		select {
		case <-l.Ready():
			t.Fatal("ready on an incomplete table")
		default:
		}
		if _, _, _, ok := l.Lookup(1); ok || l.Version() != 0 || l.Entries() != nil {
			t.Fatal("a table was published")
		}
	}
	notReady()
	if st := l.Stats(); st.Rejected != 1 || st.NACKs != 0 {
		t.Fatalf("stats %+v, want 1 rejected", st)
	}

	// All 64 blocks, but a's block leaves (0, q/2] uncovered.
	srv.publish(map[uint32]*fugev1.ArcBlock{a: wire.ArcBlock(ns, testBits, a, []lease.Entry{ent(q/2, q, "a", 1)})})
	srv.waitAcked(ArcBlockTypeURL, 2)
	notReady()
	if st := l.Stats(); st.Rejected != 2 || st.NACKs != 0 {
		t.Fatalf("stats %+v, want 2 rejected", st)
	}

	srv.setTable(quarters...)
	waitReady(t, l)
	checkAt(t, l, 1, quarters[0])
	if st := l.Stats(); st.Rejected != 2 || st.Updates != 1 {
		t.Fatalf("stats %+v, want 1 update", st)
	}
	noLoss(t, losses) // still the first table
}

func TestXDSUpdateNotifiesLoss(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)

	up := l.Updated()
	table := replaced(quarters, 1, ent(q, 2*q, "b", 5))
	srv.setTable(table...)
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
	// half moves to e under the same generation (no loss there). Two
	// blocks change in one push.
	srv.setTable(replaced(table, 2, ent(2*q, 2*q+q/2, "c", 6), ent(2*q+q/2, 3*q, "e", 3))...)
	checkLoss(t, waitLoss(t, losses), false, rg(2*q, 2*q+q/2))
	checkAt(t, l, 3*q, ent(2*q+q/2, 3*q, "e", 3))
	checkAt(t, l, 2*q+1, ent(2*q, 2*q+q/2, "c", 6))
	resps := blockResponses(lastStream(srv.records()))
	want := []string{wire.BlockName(ns, wire.BlockOf(2*q+q/2, testBits)), wire.BlockName(ns, wire.BlockOf(3*q, testBits))}
	if got := resourceNames(resps[len(resps)-1:]); !slices.Equal(got, want) {
		t.Fatalf("the split came as blocks %v, want %v", got, want)
	}
	if st := l.Stats(); st.LossNotifications != 2 || st.LossAll != 0 || st.Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A table cut anew into blocks of another size (a manager that heard the
// namespace's ring size after serving its first view) replaces the blocks
// held: those of the old size are dropped, and the table is the new
// blocks', growing from 64 to 256 blocks and back to 64 with the blocks
// past them removed.
func TestXDSBlocksResized(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)

	table := replaced(quarters, 1, ent(q, 2*q, "b", 5))
	srv.publish(tableBlocksOf(ns, testBits+2, table))
	checkLoss(t, waitLoss(t, losses), false, rg(q, 2*q))
	checkAt(t, l, q+1, ent(q, 2*q, "b", 5))
	checkAt(t, l, 3*q, quarters[2])

	table = replaced(table, 2, ent(2*q, 3*q, "c", 6))
	var past []uint32
	for b := uint32(testBlocks); b < 4*testBlocks; b++ {
		past = append(past, b)
	}
	srv.publish(tableBlocksOf(ns, testBits, table), past...)
	checkLoss(t, waitLoss(t, losses), false, rg(2*q, 3*q))
	checkAt(t, l, 2*q+1, ent(2*q, 3*q, "c", 6))
	checkAt(t, l, 0, quarters[3])
	if got, want := l.Entries(), []lease.Entry{quarters[3], quarters[0], table[1], table[2]}; !slices.Equal(got, want) {
		t.Fatalf("table %v, want %v", got, want)
	}
	if st := l.Stats(); st.NACKs != 0 || st.Rejected != 0 || st.LossAll != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Blocks of a new size that do not make a whole table (the manager cut the
// table anew and believes the lookup holds the other blocks under their
// old names) are not applied, and the lookup opens a new stream, sending
// only the versions of the blocks it holds of the new size, which
// receives the rest. Without the new stream the wait for a second open
// times out.
func TestXDSBlocksResizedIncompleteRestartsStream(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)
	srv.wait("the first stream", func(_ []record, opens int) bool { return opens == 1 })

	// Only the blocks of the second quarter, at four times the count.
	table := replaced(quarters, 1, ent(q, 2*q, "b", 5))
	big := tableBlocksOf(ns, testBits+2, table)
	part := map[uint32]*fugev1.ArcBlock{}
	for b, blk := range big {
		if lo, hi := wire.BlockOf(q+1, testBits+2), wire.BlockOf(2*q, testBits+2); b >= lo && b <= hi {
			part[b] = blk
		}
	}
	srv.publish(part)
	srv.wait("a new stream after an incomplete resized table", func(_ []record, opens int) bool { return opens >= 2 })
	if st := l.Stats(); st.Rejected == 0 {
		t.Fatalf("the incomplete table was not counted as rejected: %+v", st)
	}
	if got, want := l.Entries(), []lease.Entry{quarters[3], quarters[0], quarters[1], quarters[2]}; !slices.Equal(got, want) {
		t.Fatalf("table %v after an incomplete resize, want the old one %v", got, want)
	}
	noLoss(t, losses)

	// The whole table at the new size: the lookup takes it.
	srv.publish(big)
	checkLoss(t, waitLoss(t, losses), false, rg(q, 2*q))
	checkAt(t, l, q+1, ent(q, 2*q, "b", 5))
	checkAt(t, l, 3*q, quarters[2])
	if st := l.Stats(); st.LossAll != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A change of one arc arrives as the one block that holds it, and
// notifies exactly that arc's range, not its block's.
func TestXDSOneBlockChangeNotifiesOneArc(t *testing.T) {
	const n, step = 256, uint64(1) << 56 // four arcs per block
	table := make([]lease.Entry, n)
	for i := range table {
		table[i] = ent(uint64(i)*step, uint64(i+1)*step, string(rune('a'+i%4)), lease.Gen(i+1))
	}
	srv := newXDSServer(t, ns, table...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)
	srv.waitAcked(ArcBlockTypeURL, 1)
	sent := len(blockResponses(lastStream(srv.records())))

	const i = 129 // the second of the four arcs of block 32
	changed := ent(uint64(i)*step, uint64(i+1)*step, "x", 1000)
	if b := wire.BlockOf(changed.Range.End, testBits); b != 32 || wire.BlockOf(table[i-1].Range.End, testBits) != b || wire.BlockOf(table[i+1].Range.End, testBits) != b {
		t.Fatalf("arcs %d to %d are not all in block 32", i-1, i+1)
	}
	srv.setTable(replaced(table, i, changed)...)
	checkLoss(t, waitLoss(t, losses), false, changed.Range)

	resps := blockResponses(lastStream(srv.records()))
	if got, want := resourceNames(resps[sent:]), []string{wire.BlockName(ns, 32)}; !slices.Equal(got, want) {
		t.Fatalf("the change came as blocks %v, want %v", got, want)
	}
	for j, e := range replaced(table, i, changed) {
		checkAt(t, l, e.Range.End, e)
		if j == i-1 || j == i+1 {
			checkAt(t, l, e.Range.Start+1, e) // the same block, untouched
		}
	}
	if v, st := l.Version(), l.Stats(); v != 2 || st.LossNotifications != 1 || st.Rejected != 0 {
		t.Fatalf("Version %d, stats %+v", v, st)
	}
	noLoss(t, losses)
}

// A block the server removes is held empty, and is not sent back.
func TestXDSRemovedBlockIsEmpty(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)

	// b takes over a's arc: a's block now holds nothing and is removed
	// rather than sent empty.
	a, b := wire.BlockOf(quarters[0].Range.End, testBits), wire.BlockOf(quarters[1].Range.End, testBits)
	merged := ent(0, 2*q, "b", 5)
	srv.publish(map[uint32]*fugev1.ArcBlock{b: wire.ArcBlock(ns, testBits, b, []lease.Entry{merged})}, a)
	checkLoss(t, waitLoss(t, losses), false, rg(0, 2*q))
	checkAt(t, l, 1, merged)
	resps := blockResponses(lastStream(srv.records()))
	if last := resps[len(resps)-1]; !slices.Equal(last.RemovedResources, []string{wire.BlockName(ns, a)}) {
		t.Fatalf("last response %v does not remove a's block", last)
	}

	srv.stop()
	srv.start()
	srv.waitAcked(ArcBlockTypeURL, 1) // on the new stream
	var versions map[string]string
	for _, r := range lastStream(srv.records()) {
		if r.req != nil && r.req.TypeUrl == ArcBlockTypeURL && r.req.ResponseNonce == "" {
			versions = r.req.InitialResourceVersions
		}
	}
	if _, ok := versions[wire.BlockName(ns, a)]; ok || len(versions) != testBlocks-1 {
		t.Fatalf("initial_resource_versions %v: want the %d blocks held but a's", versions, testBlocks-1)
	}
	if st := l.Stats(); st.Rejected != 0 || st.Reconnects == 0 {
		t.Fatalf("stats %+v: the table without a's block should stay complete", st)
	}
	checkAt(t, l, 1, merged)
	noLoss(t, losses)
}

func TestXDSReconnectSendsVersions(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)
	srv.waitAcked(ArcBlockTypeURL, 1)
	held := map[string]string{}
	for _, resp := range blockResponses(srv.records()) {
		for _, res := range resp.Resources {
			held[res.Name] = res.Version
		}
	}
	if len(held) != testBlocks || held[wire.BlockName(ns, 0)] != "1" {
		t.Fatalf("server sent %v, want %d blocks at LSN 1", held, testBlocks)
	}

	srv.stop()
	srv.setTable(replaced(quarters, 3, ent(3*q, 0, "d", 9))...) // while the Lookup is cut off: LSN 2
	srv.start()
	checkLoss(t, waitLoss(t, losses), false, rg(3*q, 0))
	checkAt(t, l, 3*q+1, ent(3*q, 0, "d", 9))

	recs := lastStream(srv.records())
	var first *discovery.DeltaDiscoveryRequest
	for _, r := range recs {
		if r.req != nil && r.req.TypeUrl == ArcBlockTypeURL && first == nil {
			first = r.req
		}
	}
	if first == nil || !maps.Equal(first.InitialResourceVersions, held) {
		t.Fatalf("initial_resource_versions = %v, want %v", first.GetInitialResourceVersions(), held)
	}
	// Only d's block came back, at the new LSN.
	var got []string
	for _, resp := range blockResponses(recs) {
		for _, res := range resp.Resources {
			got = append(got, res.Name+"@"+res.Version)
		}
	}
	if want := []string{wire.BlockName(ns, 0) + "@2"}; !slices.Equal(got, want) {
		t.Fatalf("the new stream sent blocks %v, want %v", got, want)
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

// TestXDSFollowsStandbyTrailer: a leader that leaves Lookups to its
// standbys names one; the Lookup goes there at once, with no backoff (a
// backoff of a minute would time the test out).
func TestXDSFollowsStandbyTrailer(t *testing.T) {
	standby := newXDSServer(t, ns, quarters...)
	leader := newXDSServer(t, ns)
	leader.shedTo(standby.Addr())
	// The standby is not in the list: only the trailer leads there.
	l, _ := startLookup(t, []string{leader.Addr()}, func(c *LookupConfig) {
		c.Backoff = BackoffConfig{Base: time.Minute, Max: time.Minute}
	})
	waitReady(t, l)
	if st := l.Stats(); st.Redirects != 1 || st.Attempts != 2 {
		t.Fatalf("stats %+v, want 1 redirect in 2 attempts", st)
	}
	leader.wait("the refused stream", func(log []record, opens int) bool { return opens > 0 })
	if n := len(leader.records()); n != 0 {
		t.Fatalf("the leader processed %d messages", n)
	}
	checkAt(t, l, q, quarters[0])
}

// TestXDSFallsBackToLeader: the standby the leader names cannot be
// reached; the Lookup then asks the leader to serve it
// (wire.LeaderFallbackKey), and the leader does.
func TestXDSFallsBackToLeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	leader := newXDSServer(t, ns, quarters...)
	leader.shedTo(dead)
	l, _ := startLookup(t, []string{leader.Addr()}, nil)
	waitReady(t, l)
	if st := l.Stats(); st.Redirects < 1 || st.Attempts < 3 {
		t.Fatalf("stats %+v, want a redirect to the standby, then the leader again", st)
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
	srv.waitAcked(ArcBlockTypeURL, 1)
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
	srv.setTable(replaced(quarters, 2, ent(2*q, 3*q, "c", 8))...)
	srv.start()
	checkLoss(t, waitLoss(t, losses), false, rg(2*q, 3*q))
}

// A block whose bit count or number is out of bounds NACKs its response,
// and nothing of the response is applied: not the good block sent with it
// either.
func TestXDSNACKBlockBounds(t *testing.T) {
	d := wire.BlockOf(quarters[3].Range.End, testBits)
	for _, tc := range []struct {
		name string
		num  uint32
		blk  *fugev1.ArcBlock
	}{
		{"too many bits", 0, wire.ArcBlock(ns, wire.MaxBlockBits+1, 0, nil)},
		{"too few bits", 0, wire.ArcBlock(ns, wire.MinBlockBits-1, 0, nil)},
		{"no bit count", 0, &fugev1.ArcBlock{Namespace: ns}},
		{"block past the last", testBlocks, wire.ArcBlock(ns, testBits, testBlocks, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newXDSServer(t, ns, quarters...)
			l, losses := startLookup(t, []string{srv.Addr()}, nil)
			waitReady(t, l)
			srv.publish(map[uint32]*fugev1.ArcBlock{
				d:      wire.ArcBlock(ns, testBits, d, []lease.Entry{ent(3*q, 0, "d", 9)}),
				tc.num: tc.blk,
			})
			srv.wait("a NACK", func(log []record, _ int) bool {
				return slices.ContainsFunc(log, func(r record) bool { return r.req != nil && r.req.ErrorDetail != nil })
			})
			checkAt(t, l, 3*q+1, quarters[3])
			checkAt(t, l, 1, quarters[0])
			noLoss(t, losses)
			if st := l.Stats(); st.NACKs == 0 || l.Version() != 1 {
				t.Fatalf("stats %+v, version %d: want a NACK and the first table still", st, l.Version())
			}
		})
	}
}

func TestXDSNACK(t *testing.T) {
	srv := newXDSServer(t, ns, quarters...)
	l, losses := startLookup(t, []string{srv.Addr()}, nil)
	waitReady(t, l)

	// One push: d's block with d under a new generation, and b's block
	// with b held without an address.
	d, b := wire.BlockOf(quarters[3].Range.End, testBits), wire.BlockOf(quarters[1].Range.End, testBits)
	badBlock := wire.ArcBlock(ns, testBits, b, []lease.Entry{quarters[1]})
	badBlock.Arcs[0].Addr = ""
	srv.publish(map[uint32]*fugev1.ArcBlock{
		d: wire.ArcBlock(ns, testBits, d, []lease.Entry{ent(3*q, 0, "d", 9)}),
		b: badBlock,
	})
	bad := wire.BlockName(ns, b)
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
		if !strings.Contains(r.req.ErrorDetail.Message, bad) || r.req.TypeUrl != ArcBlockTypeURL {
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
	srv.setTable(ent(0, q, "a", 1), ent(q, 2*q, "b", 7), quarters[2], ent(3*q, 0, "d", 9))
	checkLoss(t, waitLoss(t, losses), false, rg(3*q, 0), rg(q, 2*q))
	checkAt(t, l, q+1, ent(q, 2*q, "b", 7))
	checkAt(t, l, 3*q+1, ent(3*q, 0, "d", 9))
	if st := l.Stats(); st.Reconnects == 0 || st.Updates != 2 {
		t.Fatalf("stats %+v, want a reconnect and 2 updates", st)
	}
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
		{"pool", func(c *LookupConfig) { c.Conns = &ConnPool{} }, nil},
		{"pool and dial options", func(c *LookupConfig) {
			c.Conns, c.DialOptions = &ConnPool{}, []grpc.DialOption{grpc.WithUserAgent("x")}
		}, ErrPoolOptions},
		{"pool and keepalive", func(c *LookupConfig) { c.Conns, c.KeepaliveTime = &ConnPool{}, time.Minute }, ErrPoolOptions},
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
	l.publish(chunkedOf(c.Entries(), chunkSize), c.Stats())
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
