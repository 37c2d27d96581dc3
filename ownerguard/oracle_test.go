package ownerguard

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// The oracle cuts the circle at nAtoms positions; every range in the test
// starts and ends at one of them, so it is a union of atoms, and the rules
// can be applied to each atom alone.
const nAtoms = 16

func atomPos(j int) uint64 { return uint64(j) << 60 }

// inAtom reports whether r covers atom j, the arc (atomPos(j), atomPos(j+1)].
func inAtom(r ring.Range, j int) bool { return r.Contains(atomPos(j) + 1) }

type point struct {
	held bool
	gen  lease.Gen
	exp  int64
}

type atoms [nAtoms]lease.Gen // 0: not in the set

func rangeAtoms(rs []ring.Range) (a [nAtoms]bool) {
	for _, r := range rs {
		for j := range a {
			a[j] = a[j] || inAtom(r, j)
		}
	}
	return a
}

// leaseAtoms expands leases, reporting overlaps and uncompacted neighbours.
func leaseAtoms(ls []lease.Lease) (a atoms, err error) {
	for i, l := range ls {
		for j := range a {
			if inAtom(l.Range, j) {
				if a[j] != 0 {
					return a, fmt.Errorf("leases overlap at atom %d", j)
				}
				a[j] = l.Gen
			}
		}
		if i > 0 && ls[i-1].Gen == l.Gen && ls[i-1].Range.End == l.Range.Start {
			return a, fmt.Errorf("%v and %v not merged", ls[i-1], l)
		}
	}
	return a, nil
}

// TestOracle drives a Core with random responses and ticks, and checks
// every output against the rules applied atom by atom.
func TestOracle(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		if err := runOracle(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func runOracle(seed uint64) error {
	rnd := rand.New(rand.NewPCG(seed, 99))
	cfg := testConfig()
	c, err := NewCore(cfg)
	if err != nil {
		return err
	}
	m := &fakeMgr{nonce: mgrNonce}
	randRange := func() ring.Range { return rg(atomPos(rnd.IntN(nAtoms)), atomPos(rnd.IntN(nAtoms))) }
	var o [nAtoms]point
	now := at(0)
	req := c.Start(now).Send
	sentAt := now
	nextGen := lease.Gen(1)
	for step := range 80 {
		now = now.Add(time.Duration(rnd.Int64N(int64(testT / 3))))
		n := now.UnixNano()
		var out Output
		var granted, revoked [nAtoms]bool
		var refused atoms
		what := "tick"
		if rnd.IntN(3) == 0 {
			out = c.Tick(now)
			for j := range o {
				if o[j].held && o[j].exp <= n {
					revoked[j], o[j] = true, point{}
				}
			}
		} else {
			var renew, grant []lease.Lease
			for _, l := range req.Held {
				switch rnd.IntN(8) {
				case 0:
					continue // recall
				case 1:
					l.Range = randRange()
				case 2:
					l.Gen++
				}
				renew = append(renew, l)
			}
			if rnd.IntN(4) == 0 { // a renewal of something not held
				renew = append(renew, ls(randRange(), lease.Gen(rnd.IntN(int(nextGen)))+1))
			}
			for rnd.IntN(3) == 0 {
				grant = append(grant, ls(randRange(), nextGen))
				nextGen++
			}
			what = fmt.Sprintf("renew %v grant %v", lease.FormatLeases(renew), lease.FormatLeases(grant))
			out = c.Step(m.reply(req, renew, grant), now)

			exp := sentAt.UnixNano() + int64(testT)
			live := exp > n
			var next [nAtoms]point
			for j := range o {
				cur := o[j]
				if cur.held && cur.exp <= n {
					cur = point{}
				}
				for _, l := range renew {
					if inAtom(l.Range, j) {
						if live && cur.held && cur.gen == l.Gen {
							next[j] = point{true, l.Gen, exp}
						} else {
							refused[j] = l.Gen
						}
					}
				}
				for _, l := range grant {
					if inAtom(l.Range, j) {
						if live {
							next[j], refused[j] = point{true, l.Gen, exp}, 0
						} else {
							refused[j] = l.Gen
						}
					}
				}
				prev := o[j]
				changed := prev.held != next[j].held || prev.gen != next[j].gen
				revoked[j] = prev.held && changed
				granted[j] = next[j].held && changed
			}
			o = next
			wantSend := refused != atoms{} || granted != [nAtoms]bool{} || revoked != [nAtoms]bool{}
			if (out.Send != nil) != wantSend {
				return fmt.Errorf("step %d (%s): Send = %+v, want a request: %v", step, what, out.Send, wantSend)
			}
		}
		fail := func(f string, args ...any) error {
			return fmt.Errorf("step %d at %v (%s): %s", step, now.Sub(t0), what, fmt.Sprintf(f, args...))
		}
		if got := rangeAtoms(out.Granted); got != granted {
			return fail("Granted %v = %v, want %v", out.Granted, got, granted)
		}
		if got := rangeAtoms(out.Revoked); got != revoked {
			return fail("Revoked %v = %v, want %v", out.Revoked, got, revoked)
		}
		var held atoms
		for j, p := range o {
			if p.held && p.exp > n {
				held[j] = p.gen
			}
		}
		got, err := leaseAtoms(c.Held(now))
		if err != nil || got != held {
			return fail("Held %v = %v (%v), want %v", lease.FormatLeases(c.Held(now)), got, err, held)
		}
		for j := range nAtoms {
			for _, k := range []uint64{atomPos(j) + 1, atomPos(j + 1)} {
				h, ok := c.GetOwnershipHandle(k, now)
				if ok != (held[j] != 0) || h.Gen != held[j] || ok && !h.Range.Contains(k) {
					return fail("GetOwnershipHandle(%x) = %+v, %v; want gen %d", k, h, ok, held[j])
				}
			}
		}
		if out.Send != nil {
			req, sentAt = out.Send, now
			if got, err := leaseAtoms(req.Held); err != nil || got != held {
				return fail("request Held %v = %v (%v), want %v", lease.FormatLeases(req.Held), got, err, held)
			}
			if got, err := leaseAtoms(req.Refused); err != nil || got != refused {
				return fail("request Refused %v = %v (%v), want %v", lease.FormatLeases(req.Refused), got, err, refused)
			}
		}
	}
	return nil
}
