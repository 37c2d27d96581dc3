package ownerguard

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestAcceptRules checks how an accepted response changes the held set. The
// core first holds before (granted at 1s in answer to the request sent at 0),
// then accepts renew and grant at 17s in answer to its periodic request sent
// at 16s: what it keeps or takes expires at 16s+T.
func TestAcceptRules(t *testing.T) {
	const top = ^uint64(0)
	a, b := rg(100, 200), rg(200, 300)
	wrap := rg(top-99, 100)
	for _, tc := range []struct {
		name           string
		before         []lease.Lease
		renew, grant   []lease.Lease
		held           []lease.Lease
		granted, revok []ring.Range
		refused        []lease.Lease
		send           bool
	}{{
		name:   "renew all: no change, no request",
		before: []lease.Lease{ls(a, 5)},
		renew:  []lease.Lease{ls(a, 5)},
		held:   []lease.Lease{ls(a, 5)},
	}, {
		name:   "recall one of two",
		before: []lease.Lease{ls(a, 5), ls(rg(400, 500), 6)},
		renew:  []lease.Lease{ls(a, 5)},
		held:   []lease.Lease{ls(a, 5)},
		revok:  []ring.Range{rg(400, 500)},
		send:   true,
	}, {
		name:   "recall everything",
		before: []lease.Lease{ls(a, 5), ls(b, 6)},
		revok:  []ring.Range{rg(100, 300)},
		send:   true,
	}, {
		name:   "partial renew revokes the rest",
		before: []lease.Lease{ls(rg(100, 300), 5)},
		renew:  []lease.Lease{ls(a, 5)},
		held:   []lease.Lease{ls(a, 5)},
		revok:  []ring.Range{b},
		send:   true,
	}, {
		name:    "renew under another gen is refused and the held gen recalled",
		before:  []lease.Lease{ls(a, 5)},
		renew:   []lease.Lease{ls(a, 4)},
		revok:   []ring.Range{a},
		refused: []lease.Lease{ls(a, 4)},
		send:    true,
	}, {
		name:    "renew beyond what is held: the excess is refused",
		before:  []lease.Lease{ls(a, 5)},
		renew:   []lease.Lease{ls(rg(100, 300), 5)},
		held:    []lease.Lease{ls(a, 5)},
		refused: []lease.Lease{ls(b, 5)},
		send:    true,
	}, {
		name:    "renew of a lease never held is refused",
		renew:   []lease.Lease{ls(a, 5), ls(b, 6)},
		refused: []lease.Lease{ls(a, 5), ls(b, 6)},
		send:    true,
	}, {
		name:    "grant next to a renewal",
		before:  []lease.Lease{ls(a, 5)},
		renew:   []lease.Lease{ls(a, 5)},
		grant:   []lease.Lease{ls(b, 9)},
		held:    []lease.Lease{ls(a, 5), ls(b, 9)},
		granted: []ring.Range{b},
		send:    true,
	}, {
		name:    "adjacent leases of one gen merge",
		before:  []lease.Lease{ls(a, 5)},
		renew:   []lease.Lease{ls(a, 5)},
		grant:   []lease.Lease{ls(b, 5)},
		held:    []lease.Lease{ls(rg(100, 300), 5)},
		granted: []ring.Range{b},
		send:    true,
	}, {
		name:    "a grant overrides a held gen",
		before:  []lease.Lease{ls(a, 5)},
		renew:   []lease.Lease{ls(a, 5)},
		grant:   []lease.Lease{ls(rg(150, 250), 9)},
		held:    []lease.Lease{ls(rg(100, 150), 5), ls(rg(150, 250), 9)},
		granted: []ring.Range{rg(150, 250)},
		revok:   []ring.Range{rg(150, 200)},
		send:    true,
	}, {
		name:    "regrant under a new gen",
		before:  []lease.Lease{ls(a, 5)},
		grant:   []lease.Lease{ls(a, 6)},
		held:    []lease.Lease{ls(a, 6)},
		granted: []ring.Range{a},
		revok:   []ring.Range{a},
		send:    true,
	}, {
		name:    "a grant cancels a refusal of the same points",
		renew:   []lease.Lease{ls(rg(100, 300), 4)},
		grant:   []lease.Lease{ls(b, 9)},
		held:    []lease.Lease{ls(b, 9)},
		granted: []ring.Range{b},
		refused: []lease.Lease{ls(a, 4)},
		send:    true,
	}, {
		name:   "renew across the wrap",
		before: []lease.Lease{ls(wrap, 5)},
		renew:  []lease.Lease{ls(wrap, 5)},
		held:   []lease.Lease{ls(wrap, 5)},
	}, {
		name:   "partial renew across the wrap",
		before: []lease.Lease{ls(wrap, 5)},
		renew:  []lease.Lease{ls(rg(top-99, 0), 5)},
		held:   []lease.Lease{ls(rg(top-99, 0), 5)},
		revok:  []ring.Range{rg(0, 100)},
		send:   true,
	}, {
		name:   "recall across the wrap",
		before: []lease.Lease{ls(wrap, 6), ls(rg(top-199, top-99), 5)}, // in order of End
		revok:  []ring.Range{rg(top-199, 100)},
		send:   true,
	}, {
		name:    "grants meeting at the wrap merge",
		before:  []lease.Lease{ls(rg(top-99, 0), 5)},
		renew:   []lease.Lease{ls(rg(top-99, 0), 5)},
		grant:   []lease.Lease{ls(rg(0, 100), 5)},
		held:    []lease.Lease{ls(wrap, 5)},
		granted: []ring.Range{rg(0, 100)},
		send:    true,
	}, {
		name:   "the whole circle",
		before: []lease.Lease{ls(rg(7, 7), 5)},
		renew:  []lease.Lease{ls(rg(7, 7), 5)},
		held:   []lease.Lease{ls(rg(7, 7), 5)},
	}, {
		name:    "a hole in the whole circle",
		before:  []lease.Lease{ls(rg(7, 7), 5)},
		renew:   []lease.Lease{ls(rg(100, 7), 5), ls(rg(7, 50), 5)},
		held:    []lease.Lease{ls(rg(100, 50), 5)},
		revok:   []ring.Range{rg(50, 100)},
		refused: nil,
		send:    true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(t, nil)
			m := &fakeMgr{nonce: mgrNonce}
			req := c.Start(at(0)).Send
			c.Step(m.reply(req, nil, tc.before), at(time.Second))
			req = c.Tick(at(16 * time.Second)).Send // the periodic request
			if req == nil {
				t.Fatal("no periodic request at 16s")
			}
			if !eqLeases(req.Held, tc.before) {
				t.Fatalf("periodic request Held = %v, want %v", lease.FormatLeases(req.Held), lease.FormatLeases(tc.before))
			}
			out := c.Step(m.reply(req, tc.renew, tc.grant), at(17*time.Second))
			checkOutput(t, "accept", out, tc.granted, tc.revok)
			checkHeld(t, "after", c, at(17*time.Second), tc.held...)
			checkHeld(t, "just before 16s+T", c, at(16*time.Second+testT-1), tc.held...)
			checkHeld(t, "at 16s+T", c, at(16*time.Second+testT))
			if (out.Send != nil) != tc.send {
				t.Fatalf("Send = %+v, want a request: %v", out.Send, tc.send)
			}
			if out.Send == nil {
				return
			}
			if !eqLeases(out.Send.Held, tc.held) {
				t.Errorf("request Held = %v, want %v", lease.FormatLeases(out.Send.Held), lease.FormatLeases(tc.held))
			}
			if !eqLeases(out.Send.Refused, tc.refused) {
				t.Errorf("request Refused = %v, want %v", lease.FormatLeases(out.Send.Refused), lease.FormatLeases(tc.refused))
			}
			if got := c.Stats().Refused; got != uint64(len(tc.refused)) {
				t.Errorf("Stats().Refused = %d, want %d", got, len(tc.refused))
			}
		})
	}
}
