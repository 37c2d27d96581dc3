package ownerguard

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

var (
	rangeA = rg(100, 200)
	rangeB = rg(300, 400)
	leaseA = ls(rangeA, 5)
	leaseB = ls(rangeB, 6)
)

func TestStartSendsFirstRequest(t *testing.T) {
	c := newCore(t, nil)
	checkDeadline(t, "before Start", c, time.Time{})
	out := c.Start(at(0))
	checkOutput(t, "Start", out, nil, nil)
	req := out.Send
	if req == nil {
		t.Fatal("Start sent nothing")
	}
	want := lease.Header{Nonce: testInc, Seq: 1}
	if req.Namespace != testNS || req.Owner != testName || req.Addr != testAddr || req.Header != want {
		t.Errorf("first request %+v, want %s/%s at %s with header %v", req, testNS, testName, testAddr, want)
	}
	if len(req.Held) != 0 || len(req.Refused) != 0 || len(req.Migrated) != 0 {
		t.Errorf("first request carries leases: %+v", req)
	}
	checkDeadline(t, "after Start", c, at(testT/4))
	if s := c.Stats(); s.Sent != 1 {
		t.Errorf("Stats().Sent = %d, want 1", s.Sent)
	}
}

func TestGrantExpiresTAfterSend(t *testing.T) {
	c := newCore(t, nil)
	m := &fakeMgr{nonce: mgrNonce}
	req := c.Start(at(0)).Send
	// The grant takes 5s to arrive; the lease still runs from the send.
	out := c.Step(m.reply(req, nil, []lease.Lease{leaseA}), at(5*time.Second))
	checkOutput(t, "grant", out, []ring.Range{rangeA}, nil)
	if out.Send == nil {
		t.Fatal("a grant sent no request")
	}
	want := lease.Header{Nonce: testInc, Seq: 2, PeerNonce: mgrNonce, AckSeq: 1}
	if out.Send.Header != want || !eqLeases(out.Send.Held, []lease.Lease{leaseA}) {
		t.Errorf("request after grant: %v %v, want %v [%v]", out.Send.Header, lease.FormatLeases(out.Send.Held), want, leaseA)
	}
	checkHeld(t, "just before T", c, at(testT-1), leaseA)
	checkHeld(t, "at T", c, at(testT))
	// The next renewal is due RenewInterval after the latest send (5s).
	checkDeadline(t, "after grant", c, at(5*time.Second+testT/4))

	// Renewal: the answer to the request sent at 5s extends to 5s+T.
	out = c.Step(m.reply(out.Send, []lease.Lease{leaseA}, nil), at(6*time.Second))
	checkOutput(t, "renew", out, nil, nil)
	if out.Send != nil {
		t.Errorf("an unchanged renewal sent %+v", out.Send)
	}
	checkHeld(t, "at T after renewal", c, at(testT), leaseA)
	checkHeld(t, "just before 5s+T", c, at(5*time.Second+testT-1), leaseA)
	checkHeld(t, "at 5s+T", c, at(5*time.Second+testT))
	if s := c.Stats(); s.Accepted != 2 || s.Sent != 2 {
		t.Errorf("Stats() = %+v, want 2 accepted, 2 sent", s)
	}
}

func TestRecallDropsAtOnce(t *testing.T) {
	c, m, req := granted(t, nil, leaseA, leaseB)
	out := c.Step(m.reply(req, []lease.Lease{leaseB}, nil), at(2*time.Second))
	checkOutput(t, "recall", out, nil, []ring.Range{rangeA})
	if _, ok := c.GetOwnershipHandle(150, at(2*time.Second)); ok {
		t.Error("recalled key still owned")
	}
	if out.Send == nil || !eqLeases(out.Send.Held, []lease.Lease{leaseB}) || out.Send.AckSeq != 2 {
		t.Fatalf("recall answered with %+v, want Held [%v] ack 2", out.Send, leaseB)
	}
}

func TestRestartRefusesRenewals(t *testing.T) {
	// A fresh Core is a new incarnation of owner-a; the manager still
	// thinks owner-a holds A and B.
	c := newCore(t, nil)
	m := &fakeMgr{nonce: mgrNonce}
	req := c.Start(at(0)).Send
	out := c.Step(m.reply(req, []lease.Lease{leaseA, leaseB}, nil), at(time.Second))
	checkOutput(t, "refusal", out, nil, nil)
	checkHeld(t, "after refusal", c, at(time.Second))
	if out.Send == nil {
		t.Fatal("a refusal sent no request")
	}
	if len(out.Send.Held) != 0 || !eqLeases(out.Send.Refused, []lease.Lease{leaseA, leaseB}) {
		t.Errorf("request Held %v Refused %v, want [] [%v %v]",
			lease.FormatLeases(out.Send.Held), lease.FormatLeases(out.Send.Refused), leaseA, leaseB)
	}
	if s := c.Stats(); s.Refused != 2 {
		t.Errorf("Stats().Refused = %d, want 2", s.Refused)
	}
	// Refusals are reported once.
	next := c.Tick(at(time.Second + testT/4)).Send
	if next == nil || len(next.Refused) != 0 {
		t.Errorf("periodic request %+v, want one with no refusals", next)
	}
}

func TestRenewalAfterLocalExpiryIsRefused(t *testing.T) {
	for _, tc := range []struct {
		late time.Duration
		tick bool
	}{{testT, false}, {testT, true}, {testT + time.Second/2, false}, {testT + time.Second/2, true}} {
		tick := tc.tick
		c, m, _ := granted(t, nil, leaseA) // A expires at T
		// The periodic request at 46s (1s + 3·T/4) goes out while A is held...
		var req *lease.LeaseRequest
		for d := time.Second + testT/4; d < testT; d += testT / 4 {
			req = c.Tick(at(d)).Send
		}
		if req == nil || !eqLeases(req.Held, []lease.Lease{leaseA}) {
			t.Fatalf("periodic request %+v, want one holding A", req)
		}
		// ...and its renewal arrives after A ran out locally.
		late := at(tc.late) // before the next periodic request, at 61s
		var revoked []ring.Range
		if tick {
			revoked = c.Tick(late).Revoked
		}
		out := c.Step(m.reply(req, []lease.Lease{leaseA}, nil), late)
		revoked = append(revoked, out.Revoked...)
		if !eqRanges(revoked, []ring.Range{rangeA}) || len(out.Granted) != 0 {
			t.Errorf("%+v: revoked %v granted %v, want [%v] []", tc, revoked, out.Granted, rangeA)
		}
		checkHeld(t, "after late renewal", c, late)
		if out.Send == nil || len(out.Send.Held) != 0 || !eqLeases(out.Send.Refused, []lease.Lease{leaseA}) {
			t.Errorf("%+v: request %+v, want Held [] Refused [%v]", tc, out.Send, leaseA)
		}
	}
}

func TestLateGrantIsNotTaken(t *testing.T) {
	c := newCore(t, nil)
	m := &fakeMgr{nonce: mgrNonce}
	req := c.Start(at(0)).Send
	out := c.Step(m.reply(req, nil, []lease.Lease{leaseA}), at(testT))
	checkOutput(t, "late grant", out, nil, nil)
	checkHeld(t, "late grant", c, at(testT))
	if out.Send == nil || !eqLeases(out.Send.Refused, []lease.Lease{leaseA}) {
		t.Errorf("request %+v, want Refused [%v]", out.Send, leaseA)
	}
}

func TestDroppedResponses(t *testing.T) {
	stale := func(s *CoreStats) { s.DroppedStale++ }
	for _, tc := range []struct {
		name  string
		mut   func(r *lease.LeaseResponse)
		count func(s *CoreStats) // the counter it increments, if any
	}{
		{"duplicate", func(r *lease.LeaseResponse) {}, stale},
		{"older seq", func(r *lease.LeaseResponse) { r.Seq-- }, stale},
		{"zero seq", func(r *lease.LeaseResponse) { r.Seq = 0; r.Nonce = mgrNonce2 }, stale},
		{"older incarnation", func(r *lease.LeaseResponse) { r.PeerNonce = testInc - 1 },
			func(s *CoreStats) { s.DroppedOtherIncarnation++ }},
		{"other namespace", func(r *lease.LeaseResponse) { r.Namespace = "other" }, func(*CoreStats) {}},
		{"other owner", func(r *lease.LeaseResponse) { r.Owner = "owner-b" }, func(*CoreStats) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(t, nil)
			m := &fakeMgr{nonce: mgrNonce}
			req := c.Start(at(0)).Send
			c.Step(m.reply(req, nil, []lease.Lease{leaseA}), at(time.Second))
			// Seq 2 answers the request sent at 1s and recalls A.
			recall := m.push(2, nil, nil)
			if out := c.Step(recall, at(2*time.Second)); out.Send == nil {
				t.Fatal("recall not accepted")
			}
			// A copy of the first grant would retake A if it were accepted.
			bad := recall
			bad.Grant = []lease.Lease{leaseA}
			bad.AckSeq = c.mySeq
			tc.mut(&bad)
			want := c.Stats()
			tc.count(&want)
			if out := c.Step(bad, at(3*time.Second)); out.Send != nil || len(out.Granted) != 0 {
				t.Errorf("dropped response produced %+v", out)
			}
			checkHeld(t, tc.name, c, at(3*time.Second))
			if got := c.Stats(); got != want {
				t.Errorf("Stats() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestNewManagerNonceRestartsNumbering(t *testing.T) {
	c, m, req := granted(t, nil, leaseA)
	m.seq = 10
	c.Step(m.reply(req, []lease.Lease{leaseA}, nil), at(2*time.Second))
	// A new leader numbers from 1 again.
	m2 := &fakeMgr{nonce: mgrNonce2}
	out := c.Step(m2.reply(req, []lease.Lease{leaseA}, []lease.Lease{leaseB}), at(3*time.Second))
	checkOutput(t, "new leader", out, []ring.Range{rangeB}, nil)
	want := lease.Header{Nonce: testInc, Seq: 3, PeerNonce: mgrNonce2, AckSeq: 1}
	if out.Send == nil || out.Send.Header != want {
		t.Fatalf("request %+v, want header %v", out.Send, want)
	}
}

func TestRacingResponse(t *testing.T) {
	const lo, hi = testT / 600, testT / 60
	c, m, _ := granted(t, nil, leaseA) // request 2 sent at 1s
	// The manager pushes a grant written before it saw request 2.
	race := m.push(1, []lease.Lease{leaseA}, []lease.Lease{leaseB})
	out := c.Step(race, at(2*time.Second))
	if out.Send != nil || len(out.Granted) != 0 || len(out.Revoked) != 0 {
		t.Fatalf("racing response produced %+v", out)
	}
	checkHeld(t, "after race", c, at(2*time.Second), leaseA)
	if s := c.Stats(); s.DroppedRacing != 1 {
		t.Errorf("Stats().DroppedRacing = %d, want 1", s.DroppedRacing)
	}
	due := c.NextDeadline()
	if due.Before(at(2*time.Second+lo)) || due.After(at(2*time.Second+hi)) {
		t.Fatalf("re-send due at %v, want within [2s+%v, 2s+%v]", due.Sub(t0), lo, hi)
	}
	// A second racing response does not push the re-send back.
	c.Step(m.push(1, nil, nil), at(2*time.Second+lo/2))
	checkDeadline(t, "second race", c, due)
	if out := c.Tick(due.Add(-1)); out.Send != nil {
		t.Errorf("re-send before it was due: %+v", out.Send)
	}
	resend := c.Tick(due).Send
	want := lease.Header{Nonce: testInc, Seq: 3, PeerNonce: mgrNonce, AckSeq: m.seq}
	if resend == nil || resend.Header != want || !eqLeases(resend.Held, []lease.Lease{leaseA}) {
		t.Fatalf("re-send %+v, want header %v holding A", resend, want)
	}
	checkDeadline(t, "after re-send", c, due.Add(testT/4))
}

func TestAcceptCancelsRaceResend(t *testing.T) {
	c, m, req := granted(t, nil, leaseA)
	c.Step(m.push(1, nil, nil), at(2*time.Second)) // racing
	due := c.NextDeadline()
	out := c.Step(m.reply(req, []lease.Lease{leaseA}, nil), at(2*time.Second))
	if out.Send != nil {
		t.Fatalf("unchanged renewal sent %+v", out.Send)
	}
	checkDeadline(t, "after accept", c, at(time.Second+testT/4))
	if out := c.Tick(due); out.Send != nil {
		t.Errorf("cancelled re-send was sent: %+v", out.Send)
	}
}

func TestRaceBackoffIsUniform(t *testing.T) {
	const lo, hi = testT / 600, testT / 60
	seen := map[time.Duration]bool{}
	for seed := range uint64(64) {
		c, m, _ := granted(t, func(c *CoreConfig) { c.Rand = rand.New(rand.NewPCG(seed, 0)) }, leaseA)
		c.Step(m.push(1, nil, nil), at(2*time.Second))
		d := c.NextDeadline().Sub(at(2 * time.Second))
		if d < lo || d > hi {
			t.Fatalf("seed %d: backoff %v outside [%v, %v]", seed, d, lo, hi)
		}
		seen[d] = true
	}
	if len(seen) < 32 {
		t.Errorf("only %d distinct backoffs in 64 draws", len(seen))
	}
}

// TestRaceBackoffWidens checks that the re-send window doubles with each
// racing response dropped since the last accepted one, up to half the
// renew interval, and is back to [T/600, T/60] once one is accepted: with a
// fixed window, a manager slower than the window kept crossing the owner's
// re-sends with its own, and every response was dropped until the leases
// lapsed (TestXDSConformance at R = 65536 under load).
func TestRaceBackoffWidens(t *testing.T) {
	const lo, hi, ceil = testT / 600, testT / 60, testT / 8
	for seed := range uint64(16) {
		c, m, _ := granted(t, func(c *CoreConfig) { c.Rand = rand.New(rand.NewPCG(seed, 7)) }, leaseA)
		now := 2 * time.Second
		widest := time.Duration(0)
		for k := range 8 {
			c.Step(m.push(1, nil, nil), at(now)) // acknowledges request 1: racing
			d := c.NextDeadline().Sub(at(now))
			window := min(hi<<k, ceil)
			if d < lo || d > window {
				t.Fatalf("seed %d, race %d: backoff %v outside [%v, %v]", seed, k+1, d, lo, window)
			}
			widest = max(widest, d)
			now += d
			if c.Tick(at(now)).Send == nil {
				t.Fatalf("seed %d, race %d: no re-send when due", seed, k+1)
			}
		}
		if widest <= hi {
			t.Errorf("seed %d: 8 races in a row, every backoff within the first window %v (widest %v)", seed, hi, widest)
		}
		// An accepted response resets the window.
		resend := c.Tick(at(now + testT/4)).Send
		if resend == nil {
			t.Fatalf("seed %d: no periodic request", seed)
		}
		now += testT / 4
		c.Step(m.reply(resend, []lease.Lease{leaseA}, nil), at(now))
		c.Step(m.push(1, nil, nil), at(now))
		if d := c.NextDeadline().Sub(at(now)); d < lo || d > hi {
			t.Errorf("seed %d: backoff after an accepted response %v, want within [%v, %v]", seed, d, lo, hi)
		}
	}
}

func TestDisableRaceFilter(t *testing.T) {
	off := func(c *CoreConfig) { c.DisableRaceFilter = true }
	c, m, _ := granted(t, off, leaseA)
	race := m.push(1, []lease.Lease{leaseA}, []lease.Lease{leaseB})
	out := c.Step(race, at(2*time.Second))
	checkOutput(t, "racing accepted", out, []ring.Range{rangeB}, nil)
	c.Step(race, at(3*time.Second)) // a duplicate is accepted too
	if s := c.Stats(); s.Accepted != 3 || s.DroppedRacing != 0 || s.DroppedStale != 0 {
		t.Errorf("Stats() = %+v, want 3 accepted, nothing dropped", s)
	}
	checkHeld(t, "filter off", c, at(3*time.Second), leaseA, leaseB)
}

func TestExpiryByTick(t *testing.T) {
	c, _, _ := granted(t, nil, leaseA) // held until T; request sent at 1s
	for _, step := range []struct {
		at      time.Duration
		send    bool
		revoked []ring.Range
		next    time.Duration // NextDeadline afterwards
	}{
		{time.Second, false, nil, time.Second + testT/4},
		{time.Second + testT/4 - 1, false, nil, time.Second + testT/4},
		{time.Second + testT/4, true, nil, time.Second + testT/2},
		{time.Second + testT/2, true, nil, time.Second + 3*testT/4},
		{time.Second + 3*testT/4, true, nil, testT}, // the expiry comes first
		{testT - 1, false, nil, testT},
		{testT, false, []ring.Range{rangeA}, time.Second + testT},
		{time.Second + testT, true, nil, time.Second + testT + testT/4},
	} {
		out := c.Tick(at(step.at))
		if (out.Send != nil) != step.send {
			t.Errorf("Tick(%v) sent %+v, want a request: %v", step.at, out.Send, step.send)
		}
		if !eqRanges(out.Revoked, step.revoked) {
			t.Errorf("Tick(%v) revoked %v, want %v", step.at, out.Revoked, step.revoked)
		}
		checkDeadline(t, "after Tick", c, at(step.next))
	}
	checkHeld(t, "after expiry", c, at(testT))
}

func TestStepBeforeStartIsIgnored(t *testing.T) {
	c := newCore(t, nil)
	m := &fakeMgr{nonce: mgrNonce}
	out := c.Step(m.push(0, nil, []lease.Lease{leaseA}), at(0))
	if out.Send != nil || len(out.Granted) != 0 {
		t.Errorf("Step before Start produced %+v", out)
	}
	if out := c.Tick(at(time.Hour)); out.Send != nil {
		t.Errorf("Tick before Start produced %+v", out)
	}
}
