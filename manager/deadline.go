package manager

import (
	"container/heap"

	"github.com/fuge-project/fuge/ring"
)

// deadlineKind says what a deadline is for.
type deadlineKind uint8

const (
	sessionExpiry deadlineKind = iota // s ends: T·65/60 after the last request heard from it
	grantedExpiry                     // s's Granted arcs expire (session.until)
	arcExpiry                         // Recalling arcs and orphans in r whose expiry is at
	resend                            // s's race re-send is due (session.resendAt)
	balanceRound                      // the balancing policy's next round (balancer)
	awaitExpiry                       // s's held-back message goes out (session.awaitUntil)
)

// deadline is one timer of a namespace.
type deadline struct {
	at   int64 // unix nanoseconds
	kind deadlineKind
	s    *session   // sessionExpiry, grantedExpiry, resend, awaitExpiry
	r    ring.Range // arcExpiry
}

// deadlineHeap is a min-heap of deadlines. Entries are not removed when
// they become moot (a session renewed, an arc released): whoever pops one
// checks it against the current state and, for a session whose deadline
// moved later, pushes it again. So a session has at most one pending entry
// of each kind, and a namespace's timers cost O(log n) per change rather
// than a pass over the table.
type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = deadline{}
	*h = old[:len(old)-1]
	return d
}

func (h *deadlineHeap) push(d deadline) { heap.Push(h, d) }

// next returns the earliest deadline; false if there is none.
func (h deadlineHeap) next() (int64, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[0].at, true
}

// popDue pops the earliest deadline if it is at or before now.
func (h *deadlineHeap) popDue(now int64) (deadline, bool) {
	if len(*h) == 0 || (*h)[0].at > now {
		return deadline{}, false
	}
	return heap.Pop(h).(deadline), true
}
