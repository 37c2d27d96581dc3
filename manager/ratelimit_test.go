package manager

import (
	"testing"
	"time"
)

func TestSessionLimiter(t *testing.T) {
	l := newSessionLimiter(10, 3)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if !l.allow("a", t0) {
			t.Fatalf("open %d of the burst refused", i)
		}
	}
	if l.allow("a", t0) {
		t.Fatal("a fourth open within the burst was allowed")
	}
	if !l.allow("b", t0) {
		t.Fatal("another client was refused: buckets are per client")
	}
	if l.allow("a", t0.Add(50*time.Millisecond)) {
		t.Fatal("half a token was spent")
	}
	if !l.allow("a", t0.Add(100*time.Millisecond)) {
		t.Fatal("a token earned after 100ms at 10/s was refused")
	}
	if !l.allow("a", t0.Add(time.Hour)) || !l.allow("a", t0.Add(time.Hour)) || !l.allow("a", t0.Add(time.Hour)) || l.allow("a", t0.Add(time.Hour)) {
		t.Fatal("the bucket refills to the burst, no further")
	}
}
