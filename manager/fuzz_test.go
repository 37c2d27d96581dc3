package manager

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// fuzzBytes hands out a fuzz input one byte at a time, then zeros.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// point is a ring point near the interesting ones: zero, the top, and
// sixteenths of the circle.
func (b *fuzzBytes) point() uint64 {
	c := b.next()
	switch c % 4 {
	case 0:
		return uint64(c>>2) << 60
	case 1:
		return ^uint64(0) - uint64(c>>2)
	}
	return uint64(c)<<56 + uint64(b.next())
}

// coreState is what a refused request must leave as it was.
type coreState struct {
	State  NamespaceState
	Owners []OwnerInfo
	Leases []ArcInfo
}

func snapshotCore(t *testing.T, m *Manager) coreState {
	t.Helper()
	st, err := m.State("ns")
	if err != nil {
		t.Fatal(err)
	}
	owners, _ := m.Owners("ns")
	arcs, _ := m.Leases("ns")
	return coreState{st, owners, arcs}
}

// FuzzLeaseRequest applies a sequence of owner requests, decoded from the
// input, to a lease core whose ring owners a and b have settled, with time
// passing and timers running between them. Each request has a fuzzed owner
// name, nonce, sequence and acknowledgement numbers, address, held leases
// (arcs of the table with their generations nudged, arbitrary ranges, the
// whole circle, or more ranges than the ring allows), refused leases,
// migrated ranges and the leaving flag. After every step the core's own
// invariants hold (Verify); a refused request wraps one of the documented
// sentinels, hands back no work, and leaves the namespace's state, owners
// and lease table exactly as they were.
func FuzzLeaseRequest(f *testing.F) {
	// A request is op 0 or 1, then owner, nonce, seq, peer nonce, ack,
	// address, held (0: what it holds, 1: all but one, 2: a list, 3: too
	// many), refused, migrated, leaving; see fuzzRequest. Op 2 or 3, then
	// a byte, lets time pass.
	renewA := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	f.Add(renewA)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0})                                      // a releases an arc, migrated
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 2, 10, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // a leaves; b renews later
	f.Add([]byte{0, 2, 1, 0, 0, 0, 2, 2, 0, 0, 0, 0})                                         // c on b's address
	f.Add([]byte{0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})           // a restarts; the old a speaks
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})                                            // a stale seq
	f.Add([]byte{0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0})                                            // racing: an old ack
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0})                                            // too many ranges
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 1, 2, 1, 0, 0, 0})                             // the circle, twice
	f.Add([]byte{0, 4, 3, 'x', 0xff, '/', 1, 0, 2, 0, 0, 2, 0, 0, 0, 0})                      // a made-up name
	f.Add([]byte{2, 255, 3, 255, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0})                            // everything expires; a returns
	f.Add([]byte{0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0})                                            // an unknown namespace
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 2, 1, 9, 0, 1, 1, 8, 8, 3, 0, 0})                    // b renews, listing refused leases
	f.Fuzz(func(t *testing.T, data []byte) {
		b := fuzzBytes(data)
		m := newTestManager(t, 16)
		a, o := &owner{name: "a", nonce: 1}, &owner{name: "b", nonce: 2}
		exchange(t, m, t0, a, o)
		now := t0
		for step := 0; step < 8 && len(b) > 0; step++ {
			op := b.next() % 4
			if op >= 2 {
				now = now.Add(time.Duration(b.next()) * time.Second / time.Duration(op*op))
				m.Tick(now)
				if err := m.Verify(); err != nil {
					t.Fatalf("step %d, tick to %v: %v", step, now.Sub(t0), err)
				}
				continue
			}
			req := fuzzRequest(m, &b)
			before := snapshotCore(t, m)
			out, err := m.Request(req, now)
			if err := m.Verify(); err != nil {
				t.Fatalf("step %d, request %+v: %v", step, req, err)
			}
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrIncarnationReplaced) &&
				!errors.Is(err, ErrAddressInUse) && !errors.Is(err, ErrUnknownNamespace) {
				t.Fatalf("step %d: request %+v refused with %v, which wraps no documented error", step, req, err)
			}
			if !out.Empty() {
				t.Fatalf("step %d: refused request %+v handed back work %+v", step, req, out)
			}
			if after := snapshotCore(t, m); !reflect.DeepEqual(before, after) {
				t.Fatalf("step %d: refused request %+v (%v) changed the core:\n before %+v\n after  %+v", step, req, err, before, after)
			}
		}
	})
}

// fuzzRequest decodes one owner request. Most fields are either what a
// well-behaved owner would send, given the session the core has for it, or
// a fuzzed value, so that accepted, renewing and releasing requests are as
// easy to reach as refused ones.
func fuzzRequest(m *Manager, b *fuzzBytes) lease.LeaseRequest {
	var req lease.LeaseRequest
	req.Namespace = "ns"
	switch c := b.next(); c % 6 {
	case 0, 1, 2:
		req.Owner = string(rune('a' + c%6))
	case 3:
		req.Owner = ""
	case 4:
		name := make([]byte, b.next()%8)
		for i := range name {
			name[i] = b.next()
		}
		req.Owner = string(name)
	case 5:
		req.Namespace = "other"
		req.Owner = "a"
	}
	var s session // the core's session for the owner, if any
	if p := m.ns["ns"].sessions[req.Owner]; p != nil {
		s = *p
	}
	if c := b.next(); c%4 == 0 && s.nonce != 0 {
		req.Nonce = s.nonce
	} else {
		req.Nonce = uint64(c % 4)
	}
	switch c := b.next(); c % 3 {
	case 0:
		req.Seq = s.peerSeq + 1
	case 1:
		req.Seq = s.peerSeq
	default:
		req.Seq = uint64(c / 3)
	}
	switch c := b.next(); c % 3 {
	case 0:
		req.PeerNonce = m.Nonce()
	case 1:
		req.PeerNonce = uint64(c / 3)
	}
	if c := b.next(); c%2 == 0 {
		req.AckSeq = s.mySeq
	} else {
		req.AckSeq = uint64(c / 2)
	}
	req.Addr = []string{req.Owner + ":1", "a:1", "b:1", ""}[b.next()%4]

	arcs, _ := m.Leases("ns")
	var mine []lease.Lease // what the owner holds as the core sees it
	for _, a := range arcs {
		if a.Owner == req.Owner && a.State == Granted && !a.Orphan {
			mine = append(mine, lease.Lease{Range: a.Range, Gen: a.Gen})
		}
	}
	leaseOf := func() lease.Lease {
		switch b.next() % 3 {
		case 0:
			if len(arcs) > 0 {
				a := arcs[int(b.next())%len(arcs)]
				return lease.Lease{Range: a.Range, Gen: a.Gen + lease.Gen(b.next()%3) - 1}
			}
		case 1:
			return lease.Lease{Range: ring.Range{Start: b.point(), End: b.point()}, Gen: lease.Gen(b.next() % 8)}
		}
		return lease.Lease{Range: ring.Full(), Gen: lease.Gen(b.next() % 8)}
	}
	switch b.next() % 4 {
	case 0: // all it holds
		req.Held = mine
	case 1: // all but one: a release
		if len(mine) > 0 {
			i := int(b.next()) % len(mine)
			req.Held = append(mine[:i:i], mine[i+1:]...)
			if b.next()%2 == 0 {
				req.Migrated = append(req.Migrated, mine[i].Range)
			}
		}
	case 2:
		for range b.next() % 5 {
			req.Held = append(req.Held, leaseOf())
		}
	case 3: // more disjoint ranges than a ring of 16 allows
		for i := range uint64(MaxRangesPerRing*16 + 1) {
			req.Held = append(req.Held, lease.Lease{Range: ring.Range{Start: i << 56, End: i<<56 + 1}, Gen: 1})
		}
	}
	for range b.next() % 3 {
		req.Refused = append(req.Refused, leaseOf())
	}
	for range b.next() % 3 {
		req.Migrated = append(req.Migrated, leaseOf().Range)
	}
	req.Leaving = b.next()%4 == 3
	return req
}
