package manager

import (
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
)

// sentTo returns the message to name in out, if any.
func sentTo(out Output, name string) (lease.LeaseResponse, bool) {
	for _, r := range out.Send {
		if r.Owner == name {
			return r, true
		}
	}
	return lease.LeaseResponse{}, false
}

// Stop and wait (deferMessage): a message that changes what an owner holds
// is not followed by another until the owner answers it, or until the wait
// (T/4) runs out; the held-back change goes out as the response to the
// answer, and grants made meanwhile, which the answer cannot list, are not
// released by it.
func TestMessageWaitsForTheAnswerToTheLast(t *testing.T) {
	for _, answer := range []bool{true, false} {
		m := newTestManager(t, 16)
		a, b, c := &owner{name: "a", nonce: 1}, &owner{name: "b", nonce: 2}, &owner{name: "c", nonce: 3}
		exchange(t, m, t0, a, b, c)
		// Drain c: a and b are written to (their recalls, if the new ring
		// moves arcs between them, and c's recall).
		out, err := m.Drain("ns", "c", t0)
		if err != nil {
			t.Fatal(err)
		}
		first := map[string]lease.LeaseResponse{}
		for _, o := range []*owner{a, b, c} {
			if r, ok := sentTo(out, o.name); ok {
				first[o.name] = r
				o.accept(out)
			}
		}
		if _, ok := first["c"]; !ok {
			t.Fatal("the drain wrote nothing to c")
		}
		// c releases everything; its arcs are granted to a and b. Whoever
		// has not answered the drain's message gets nothing yet.
		c.held = nil
		out, err = m.Request(c.request(), t0)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Commits) == 0 || len(out.Commits[0].Changes) == 0 {
			t.Fatal("c's release committed nothing")
		}
		freed := out.Commits[0].Changes[0].Entry.Gen
		var waiting *owner
		for _, o := range []*owner{a, b} {
			if _, wrote := first[o.name]; !wrote {
				continue
			}
			if r, ok := sentTo(out, o.name); ok {
				t.Fatalf("%s was written to (%+v) before it answered the drain's message", o.name, r)
			}
			waiting = o
		}
		if waiting == nil {
			t.Fatal("the drain wrote to neither a nor b: pick another ring")
		}
		w := m.ns["ns"].awaitWait()
		if w != 15*time.Second {
			t.Fatalf("wait %v, want T/4 = 15s", w)
		}
		if answer {
			// It answers the drain's message: the held-back grants go out
			// as the response, under the generation they were freed with.
			out, err = m.Request(waiting.request(), t0.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// It may release arcs the drain recalled from it, which go
			// to the other; none comes back to it under a new generation.
			for _, cm := range out.Commits {
				for _, ch := range cm.Changes {
					if ch.Entry.Owner == waiting.name {
						t.Fatalf("the answer released a grant it could not list: %v is %s's again under %d", ch.Entry.Range, waiting.name, ch.Entry.Gen)
					}
				}
			}
		} else {
			// No answer: nothing goes out until the wait runs out.
			if d := m.NextDeadline(); d.After(t0.Add(w)) {
				t.Fatalf("next deadline %v, want at most %v", d, t0.Add(w))
			}
			if _, ok := sentTo(m.Tick(t0.Add(w-time.Nanosecond)), waiting.name); ok {
				t.Fatalf("%s written to before the wait ran out", waiting.name)
			}
			out = m.Tick(t0.Add(w))
		}
		r, ok := sentTo(out, waiting.name)
		if !ok {
			t.Fatalf("answer=%v: the held-back message never went to %s", answer, waiting.name)
		}
		if len(r.Grant) == 0 {
			t.Fatalf("answer=%v: %s's message grants nothing: %+v", answer, waiting.name, r)
		}
		for _, g := range r.Grant {
			if g.Gen != freed {
				t.Errorf("answer=%v: %v granted under generation %d, not %d, the one c's release committed", answer, g.Range, g.Gen, freed)
			}
		}
	}
}
