package main

import (
	"strings"
	"testing"
	"time"
)

const s = int64(time.Second)

// clean is a history every checker accepts: p1 holds k under generation 1,
// p2 takes it over under generation 3 after the lookup saw the change.
func clean() *History {
	return &History{
		Bound: time.Second,
		Serves: []Serve{
			{At: 1 * s, Owner: "p1#1", Key: "k", Gen: 1, Status: 204},
			{At: 2 * s, Owner: "p1#1", Key: "k", Gen: 1, Status: 200},
			{At: 5 * s, Owner: "p2#1", Key: "k", Gen: 3, Status: 404},
			{At: 6 * s, Owner: "p2#1", Key: "k", Gen: 3, Status: 204},
		},
		Tables: []Table{{At: 0, Gens: map[string]uint64{"k": 1}}, {At: 4 * s, Gens: map[string]uint64{"k": 3}}},
		Losses: []Loss{{At: 4 * s, Gens: map[string]uint64{"k": 3}}},
		Ops: []Op{
			{Client: 0, Key: "k", Put: true, Value: "a", Call: 1*s - 10, Return: 1*s + 10, Result: OK, Gen: 1},
			{Client: 0, Key: "k", Value: "a", Found: true, Call: 2*s - 10, Return: 2*s + 10, Result: OK, Gen: 1},
			{Client: 1, Key: "k", Put: true, Value: "b", Call: 3 * s, Return: 3*s + 10, Result: Unknown},
			{Client: 0, Key: "k", Call: 5*s - 10, Return: 5*s + 10, Result: OK, Gen: 3},
			{Client: 0, Key: "k", Put: true, Value: "c", Call: 6*s - 10, Return: 6*s + 10, Result: OK, Gen: 3},
			{Client: 0, Key: "k", Value: "c", Found: true, Call: 7 * s, Return: 7*s + 10, Result: OK, Gen: 3},
			{Client: 1, Key: "k", Call: 7 * s, Return: 8 * s, Result: Failed, Why: "503"},
		},
	}
}

func TestCleanHistoryPasses(t *testing.T) {
	if v := Check(clean()); len(v) != 0 {
		t.Fatalf("violations in a clean history: %v", v)
	}
}

// want asserts that the named checker fires on h (others may too).
func want(t *testing.T, h *History, checker string) {
	t.Helper()
	for _, x := range Check(h) {
		if x.Checker == checker {
			t.Logf("caught: %v", x)
			return
		}
	}
	t.Fatalf("%s did not fire on the planted bug", checker)
}

// TestNegativeControlExclusivity: the second incarnation bug (issue 10): a
// new process under p1's name is granted k under generation 2 while the old
// one, cut off, still serves generation 1. The harness's lookup was slow to
// see generation 2, so only the owners' own logs show it.
func TestNegativeControlExclusivity(t *testing.T) {
	h := clean()
	h.Serves = append(h.Serves,
		Serve{At: 3 * s, Owner: "p1#2", Key: "k", Gen: 2, Status: 404},
		Serve{At: 3*s + s/2, Owner: "p1#1", Key: "k", Gen: 1, Status: 200})
	h.Losses = append([]Loss{{At: 3*s + s/4, Gens: map[string]uint64{"k": 2}}}, h.Losses...)
	if v := CheckFencing(h.Serves, h.Tables); len(v) != 0 {
		t.Fatalf("fencing fired: %v", v)
	}
	want(t, h, "exclusivity")
}

// TestNegativeControlSharedGeneration: two processes answer under one
// generation.
func TestNegativeControlSharedGeneration(t *testing.T) {
	h := clean()
	h.Serves = append(h.Serves, Serve{At: 1*s + s/2, Owner: "p2#1", Key: "k", Gen: 1, Status: 200})
	v := CheckExclusivity(h.Serves)
	if len(v) == 0 || !strings.Contains(v[0].What, "generation 1 served by") {
		t.Fatalf("got %v", v)
	}
}

// TestNegativeControlFencing: an owner serves its old generation after the
// lookup published the new one (an owner whose guard stopped checking).
func TestNegativeControlFencing(t *testing.T) {
	h := clean()
	h.Serves[1].At = 4*s + s/2
	want(t, h, "fencing")
}

// TestNegativeControlLinearizable: a stale read: the value written under
// generation 1 read back under generation 3 (state carried across a lost
// lease), and an unexplained 404.
func TestNegativeControlLinearizable(t *testing.T) {
	h := clean()
	h.Ops[3].Found, h.Ops[3].Value = true, "a"
	want(t, h, "linearizability")

	h = clean()
	h.Ops[1].Found, h.Ops[1].Value = false, "" // 404 under the generation that wrote "a"
	want(t, h, "linearizability")
}

// TestNegativeControlNotification: the lookup hears of generation 3 too
// late.
func TestNegativeControlNotification(t *testing.T) {
	h := clean()
	h.Losses[0].At = 7 * s
	h.Tables[1].At = 7 * s // fencing would fire on nothing: p1's serves are earlier
	want(t, h, "notification")
}

// TestNegativeControlAccounting: a call that ended with an answer the
// protocol does not allow.
func TestNegativeControlAccounting(t *testing.T) {
	h := clean()
	h.Ops[6].Result, h.Ops[6].Why = Invalid, "500 from an owner"
	want(t, h, "accounting")
}

func TestUnavailability(t *testing.T) {
	gaps := Unavailability(clean().Ops)
	// Client 1's unknown put at 3 s until the read that returned at 5 s,
	// and its failed read at 7 s until the end of the run.
	if len(gaps) != 2 || gaps[0] != time.Duration(1*s) || gaps[1] != time.Duration(2*s+10) {
		t.Fatalf("gaps %v", gaps)
	}
}
