package fugetest

import (
	"testing"

	"github.com/fuge-project/fuge/ring"
)

// TestManagerOwnersLookup starts the whole stack and checks that the
// lookup agrees with the owners on who holds a key.
func TestManagerOwnersLookup(t *testing.T) {
	m := StartManager(t, Options{})
	a := m.Owner(t, "a", "127.0.0.1:1", nil)
	b := m.Owner(t, "b", "127.0.0.1:2", nil)
	l := m.Lookup(t, "l", nil)
	m.Settled(t, l, "a", "b")
	held := map[string]int{}
	for i := range 200 {
		h := ring.HashString(string(rune('a'+i%26)) + string(rune('0'+i/26)))
		addr, _, gen, ok := l.Lookup(h)
		if !ok {
			t.Fatalf("lookup of %x: no owner", h)
		}
		o := a
		if addr == "127.0.0.1:2" {
			o = b
		}
		hd, ok := o.GetOwnershipHandle(h)
		if !ok || hd.Gen != gen {
			t.Fatalf("key %x: lookup says %s gen %d, owner says held=%v gen %d", h, addr, gen, ok, hd.Gen)
		}
		held[addr]++
	}
	if len(held) != 2 {
		t.Errorf("keys spread over %v, want both owners", held)
	}
}
