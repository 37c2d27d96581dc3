package xds

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// TestSendPoolTakesChangesFirst: the pool's workers take the streams with
// a table change queued before those with only heartbeats, a stream given
// a change while it waits moves ahead (its first place is skipped), and a
// stream that is not waiting is not queued by a change.
func TestSendPoolTakesChangesFirst(t *testing.T) {
	p := &sendPool{workers: sendWorkers} // no worker starts: next is called here
	a, b, c, d := &lookupStream{}, &lookupStream{}, &lookupStream{}, &lookupStream{}
	p.submit(a, false)
	p.submit(b, false)
	p.submit(c, true)
	p.hurry(b)
	p.hurry(d) // not waiting
	var order []*lookupStream
	for st := p.next(); st != nil; st = p.next() {
		st.pooled = notPooled // as work does
		order = append(order, st)
	}
	name := map[*lookupStream]string{a: "a", b: "b", c: "c", d: "d"}
	got := ""
	for _, st := range order {
		got += name[st]
	}
	if got != "cba" {
		t.Fatalf("taken in order %q, want cba: the change, the stream hurried, then the rest, each once", got)
	}
}

// TestNextResponseTablesFirst: a stream's sender sends its table responses
// before its heartbeats, each type in the order it was queued.
func TestNextResponseTablesFirst(t *testing.T) {
	resp := func(typeURL string) *deltaResponse {
		return &deltaResponse{req: &cache.DeltaRequest{TypeUrl: typeURL}}
	}
	hb1, blk1, hb2, blk2 := resp(HeartbeatTypeURL), resp(ArcBlockTypeURL), resp(HeartbeatTypeURL), resp(ArcBlockTypeURL)
	st := &lookupStream{queue: []*deltaResponse{hb1, blk1, hb2, blk2}}
	var got []*deltaResponse
	for len(st.queue) > 0 {
		got = append(got, st.nextResponse())
		st.queue = st.queue[1:]
	}
	want := []*deltaResponse{blk1, blk2, hb1, hb2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("response %d sent out of order: want the blocks in order, then the heartbeats in order", i)
		}
	}
}

// TestLateAnswersCollapse: a change due to a stream that has one queued for
// the same subscription, not yet being computed, adds nothing to its queue
// (that one carries it when sent), so a client that sends request after
// request without reading queues at most one response per type; one for
// another subscription, or after the sender has begun computing the queued
// one, is queued.
func TestLateAnswersCollapse(t *testing.T) {
	st := &lookupStream{t: &LeaseTable{}, sending: true} // a sender runs: deliver only queues
	var c typeCache
	blocks, beats := &lookupSub{}, &lookupSub{}
	late := func(sub *lookupSub, typeURL string) *deltaResponse {
		return &deltaResponse{req: &cache.DeltaRequest{TypeUrl: typeURL}, late: &lateAnswer{c: &c, sub: sub}}
	}
	for range 1000 {
		st.deliver(late(blocks, ArcBlockTypeURL))
		st.deliver(late(beats, HeartbeatTypeURL))
	}
	if len(st.queue) != 2 {
		t.Fatalf("1,000 changes due for each of two subscriptions queued %d responses, want 2", len(st.queue))
	}
	st.queue[0].late.taking = true
	st.deliver(late(blocks, ArcBlockTypeURL))
	if len(st.queue) != 3 {
		t.Fatalf("a change due while the queued one is computed: %d responses queued, want 3", len(st.queue))
	}
}
