package main

import (
	"math"
	"testing"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestCheckerReads runs one device through writes and reads, with the
// negative controls planted: an older address (STALE), an address never
// written (bogus) and a 404 under the write's own generation (lost).
func TestCheckerReads(t *testing.T) {
	c := NewChecker()
	const id = "dev-1"
	tok0 := c.Token(id)
	if v := c.Read(id, tok0, false, "", 3); v != OK {
		t.Errorf("404 before any write: %v, want ok", v)
	}
	c.Attempt(id, "a1")
	c.Acked(id, "a1", 3)
	tok1 := c.Token(id)
	c.Attempt(id, "a2")
	c.Acked(id, "a2", 3)
	tok2 := c.Token(id)
	c.Attempt(id, "a3") // in doubt: never acknowledged
	steps := []struct {
		name  string
		tok   Token
		found bool
		addr  string
		gen   uint64
		want  Verdict
	}{
		{"the latest", tok2, true, "a2", 3, OK},
		{"a write in doubt, newer than the latest", tok2, true, "a3", 3, OK},
		{"planted: an older address", tok2, true, "a1", 3, Stale},
		{"older than the latest, but the latest when the read began", tok1, true, "a1", 3, OK},
		{"written since the read began", tok1, true, "a2", 3, OK},
		{"planted: never written", tok2, true, "zz", 3, Bogus},
		{"planted: 404 under the write's generation", tok2, false, "", 3, Lost},
		{"404 under a new generation", tok2, false, "", 4, Missing},
	}
	for _, s := range steps {
		if v := c.Read(id, s.tok, s.found, s.addr, s.gen); v != s.want {
			t.Errorf("%s: %v, want %v", s.name, v, s.want)
		}
	}
	counts, unexplained := c.Counts()
	want := [len(verdictNames)]int{OK: 5, Missing: 1, Lost: 1, Stale: 1, Bogus: 1}
	if counts != want || unexplained != 1 {
		t.Errorf("counts %v, unexplained %d; want %v, 1", counts, unexplained, want)
	}
}

// TestCheckerExplains: a 404 under a new generation is explained by a loss
// notification covering the device with a generation newer than its write,
// whether it arrives before or after the read, and by no other.
func TestCheckerExplains(t *testing.T) {
	c := NewChecker()
	id, other := "dev-1", "dev-2"
	h := ring.HashString(id)
	here := []ring.Range{{Start: h - 1, End: h}}
	elsewhere := []ring.Range{{Start: h, End: h - 1}} // everything but h
	gen := map[uint64]uint64{}
	genAt := func(x uint64) uint64 { return gen[x] }
	c.Acked(id, "a1", 5)
	c.Acked(other, "b1", 5)

	tok := c.Token(id)
	if v := c.Read(id, tok, false, "", 6); v != Missing {
		t.Fatalf("404 under a new generation: %v", v)
	}
	gen[h] = 5 // a notification that names the write's own generation explains nothing
	if n := c.Notice(here, false, genAt); n != 0 {
		t.Errorf("notice of generation 5 explained %d reads of a write under 5", n)
	}
	gen[h] = 6
	if n := c.Notice(elsewhere, false, genAt); n != 0 {
		t.Errorf("notice elsewhere explained %d reads", n)
	}
	if n := c.Notice(here, false, genAt); n != 1 {
		t.Errorf("notice of generation 6 explained %d reads, want 1", n)
	}
	if _, u := c.Counts(); u != 0 {
		t.Errorf("%d unexplained after the notice", u)
	}
	// Notification first, then the read: explained at once.
	if v := c.Read(id, tok, false, "", 6); v != Missing {
		t.Fatalf("second 404: %v", v)
	}
	if _, u := c.Counts(); u != 0 {
		t.Errorf("a 404 after its notification left %d unexplained", u)
	}
	// Loss of everything explains any 404.
	tok = c.Token(other)
	c.Read(other, tok, false, "", 9)
	if n := c.Notice(nil, true, genAt); n != 1 {
		t.Errorf("loss of everything explained %d reads, want 1", n)
	}
}

func TestCheckerBehind(t *testing.T) {
	c := NewChecker()
	c.Acked("a", "x", 1)
	c.Acked("b", "y", 2)
	c.Attempt("c", "z") // never acknowledged: not behind
	genAt := func(uint64) uint64 { return 2 }
	if n := c.Behind(genAt); n != 1 {
		t.Errorf("behind %d, want 1 (a, written under 1)", n)
	}
	c.Acked("a", "x", 2) // republished
	if n := c.Behind(genAt); n != 0 {
		t.Errorf("behind %d after republishing", n)
	}
}

func TestDiffTables(t *testing.T) {
	q := uint64(1) << 62 // a quarter of the circle
	e := func(start, end uint64, owner string, gen lease.Gen) lease.Entry {
		return lease.Entry{Range: ring.Range{Start: start, End: end}, Owner: owner, Gen: gen}
	}
	before := []lease.Entry{e(3*q, q, "p1", 1), e(q, 2*q, "p2", 2), e(2*q, 3*q, "p3", 3)}
	after := []lease.Entry{e(3*q, q/2, "p1", 1), e(q/2, q, "p1", 7), e(q, 2*q, "p3", 8), e(2*q, 3*q, "p3", 3)}
	moved, regranted := diffTables(before, after)
	if len(moved) != 1 || math.Abs(moved[move{"p2", "p3"}]-0.25) > 1e-9 {
		t.Errorf("moved %v, want p2 -> p3 25%%", moved)
	}
	if math.Abs(regranted-0.125) > 1e-9 {
		t.Errorf("regranted %v, want 12.5%%", regranted)
	}
	if got := formatMoves(moved); got != "p2 -> p3 25.0%" {
		t.Errorf("formatMoves: %q", got)
	}
	if got := formatShares(shares(after)); got != "p1 50.0%  p3 50.0%" {
		t.Errorf("formatShares: %q", got)
	}
	full := []lease.Entry{e(0, 0, "", 0)}
	moved, _ = diffTables(full, before)
	if math.Abs(moved[move{"", "p1"}]-0.5) > 1e-9 || math.Abs(moved[move{"", "p2"}]-0.25) > 1e-9 {
		t.Errorf("from one free arc: %v", moved)
	}
}
