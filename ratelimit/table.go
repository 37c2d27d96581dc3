package ratelimit

import (
	"sync/atomic"
	"unsafe"
)

// table is an open-addressing hash table of key states that readers probe
// without a lock or an allocation. Writers (under the Limiter's mutex)
// only fill empty slots; growing and evicting build a new table and swap
// the Limiter's pointer, moving the same *keyState values, so a reader of
// the old table still updates the live buckets.
type table struct {
	mask  uint64
	slots []atomic.Pointer[keyState]
	n     int // filled slots; written under the Limiter's mutex
}

func newTable(capacity int) *table {
	size := 8
	for size < 2*capacity {
		size *= 2
	}
	return &table{mask: uint64(size - 1), slots: make([]atomic.Pointer[keyState], size)}
}

// get finds key's state.
func (t *table) get(key []byte, h uint64) *keyState {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i].Load()
		if e == nil {
			return nil
		}
		if e.hash == h && e.key == unsafeString(key) {
			return e
		}
	}
}

// put adds e, which must not be present; the caller keeps the load under
// one half.
func (t *table) put(e *keyState) {
	for i := e.hash & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == nil {
			t.slots[i].Store(e)
			t.n++
			return
		}
	}
}

// each calls f for every state.
func (t *table) each(f func(*keyState)) {
	for i := range t.slots {
		if e := t.slots[i].Load(); e != nil {
			f(e)
		}
	}
}

// unsafeString views b as a string for a comparison that does not keep it.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
