package ownerguard

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

const (
	testNS    = "ns"
	testName  = "owner-a"
	testAddr  = "10.0.0.1:8080"
	testInc   = 0xa1
	testT     = 60 * time.Second
	mgrNonce  = 0x3e
	mgrNonce2 = 0x3f
)

// t0 is the fake clock's origin; at(d) is d after it.
var t0 = time.Unix(1_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func testConfig() CoreConfig {
	return CoreConfig{
		Namespace:     testNS,
		Name:          testName,
		Addr:          testAddr,
		Incarnation:   testInc,
		LeaseDuration: testT,
		Rand:          rand.New(rand.NewPCG(1, 2)),
	}
}

func newCore(t testing.TB, mut func(*CoreConfig)) *Core {
	t.Helper()
	cfg := testConfig()
	if mut != nil {
		mut(&cfg)
	}
	c, err := NewCore(cfg)
	if err != nil {
		t.Fatalf("NewCore: %v", err)
	}
	return c
}

func rg(start, end uint64) ring.Range { return ring.Range{Start: start, End: end} }

func ls(r ring.Range, g lease.Gen) lease.Lease { return lease.Lease{Range: r, Gen: g} }

// fakeMgr numbers the responses of one manager incarnation.
type fakeMgr struct {
	nonce uint64
	seq   uint64
}

// reply answers req (acknowledging it).
func (m *fakeMgr) reply(req *lease.LeaseRequest, renew, grant []lease.Lease) lease.LeaseResponse {
	return m.push(req.Seq, renew, grant)
}

// push writes a response acknowledging the owner's request ack.
func (m *fakeMgr) push(ack uint64, renew, grant []lease.Lease) lease.LeaseResponse {
	m.seq++
	return lease.LeaseResponse{
		Namespace: testNS,
		Owner:     testName,
		Header:    lease.Header{Nonce: m.nonce, Seq: m.seq, PeerNonce: testInc, AckSeq: ack},
		Renew:     renew,
		Grant:     grant,
	}
}

// granted returns a started core holding grant (accepted at 1s, in answer
// to the first request, sent at 0), the manager, and the request the grant
// triggered (sent at 1s).
func granted(t *testing.T, mut func(*CoreConfig), grant ...lease.Lease) (*Core, *fakeMgr, *lease.LeaseRequest) {
	t.Helper()
	c := newCore(t, mut)
	m := &fakeMgr{nonce: mgrNonce}
	req := c.Start(at(0)).Send
	out := c.Step(m.reply(req, nil, grant), at(time.Second))
	if out.Send == nil {
		t.Fatalf("grant of %v sent no request", lease.FormatLeases(grant))
	}
	return c, m, out.Send
}

// eqRanges and eqLeases compare lists, taking nil as empty and any range
// with Start == End as the whole circle.
func eqRanges(a, b []ring.Range) bool {
	return slices.EqualFunc(a, b, func(x, y ring.Range) bool { return canon(x) == canon(y) })
}

func eqLeases(a, b []lease.Lease) bool {
	return slices.EqualFunc(a, b, func(x, y lease.Lease) bool { return x.Gen == y.Gen && canon(x.Range) == canon(y.Range) })
}

func checkOutput(t *testing.T, what string, out Output, granted, revoked []ring.Range) {
	t.Helper()
	if !eqRanges(out.Granted, granted) {
		t.Errorf("%s: Granted = %v, want %v", what, out.Granted, granted)
	}
	if !eqRanges(out.Revoked, revoked) {
		t.Errorf("%s: Revoked = %v, want %v", what, out.Revoked, revoked)
	}
}

func checkHeld(t *testing.T, what string, c *Core, now time.Time, want ...lease.Lease) {
	t.Helper()
	if got := c.Held(now); !eqLeases(got, want) {
		t.Errorf("%s: Held(%v) = %v, want %v", what, now.Sub(t0), lease.FormatLeases(got), lease.FormatLeases(want))
	}
}

func checkDeadline(t *testing.T, what string, c *Core, want time.Time) {
	t.Helper()
	if got := c.NextDeadline(); !got.Equal(want) {
		t.Errorf("%s: NextDeadline = %v, want %v", what, got.Sub(t0), want.Sub(t0))
	}
}
