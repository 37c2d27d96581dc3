package xds

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// Views by change. The manager's replicated state keeps a namespace's view
// as a lease.View, which a commit edits in O(changes · log n); handed the
// view and the ranges the commit set (manager.ViewObserver), the table
// compares and rebuilds only the blocks those ranges reach, instead of
// cutting and comparing every block of the whole view (65,536 entries at
// R = 65536) at every flush.

// span is a stretch of the circle where a view may differ from the one
// last published: the points from lo clockwise to lo+off, inclusive.
type span struct{ lo, off uint64 }

// maxSpans bounds the spans kept for a namespace between two publications;
// past it the whole view is compared.
const maxSpans = 4096

// NamespaceViewChanged publishes a namespace's view as NamespaceView does
// (coalescing included), knowing that it differs from the previous one
// only around changed (nil: anywhere). When the blocks as last published
// are of the view's size, only the blocks that the changes reach are
// compared and rebuilt. lv is never modified. It satisfies
// manager.ViewObserver.
func (t *LeaseTable) NamespaceViewChanged(ns string, lv lease.View, changed []ring.Range, version uint64) {
	if ns == "" || !utf8.ValidString(ns) || lv.Len() == 0 || lv.Len() > ring.MaxRingSize {
		t.badViews.Add(1)
		t.log.Error("refusing namespace view", "ns", ns, "version", version,
			"err", fmt.Errorf("%w: namespace %q, %d entries", ErrInvalidView, ns, lv.Len()))
		return
	}
	nv := &view{lv: &lv, lsn: version}
	nv.spans, nv.all = spansOf(lv, changed)
	t.views.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.spaceLocked(ns)
	if p := sp.pending; p != nil && !nv.all {
		// The kept view is replaced: what it changed is still to publish.
		if p.all || p.lv == nil || len(p.spans)+len(nv.spans) > maxSpans {
			nv.spans, nv.all = nil, true
		} else {
			nv.spans = append(p.spans, nv.spans...)
		}
	}
	sp.pending = nv
	t.scheduleLocked(ns, sp, !sp.live)
}

// spansOf returns the spans in which view may differ from the view before
// the changes: each change's range, and on to the end of the entry after
// it, whose start it may have moved (or merged into). All (false spans)
// when a change is the whole circle, the view is one range, or there are
// too many.
func spansOf(view lease.View, changed []ring.Range) (spans []span, all bool) {
	if changed == nil || view.Len() == 1 || len(changed) > maxSpans {
		return nil, true
	}
	spans = make([]span, 0, len(changed))
	for _, r := range changed {
		if r.IsFull() {
			return nil, true
		}
		next, ok := view.Lookup(r.End + 1)
		if !ok || next.Range.IsFull() {
			return nil, true
		}
		off := next.Range.End - r.Start
		if off < r.End-r.Start {
			return nil, true // round the circle
		}
		spans = append(spans, span{lo: r.Start, off: off})
	}
	return spans, false
}

// publishSpansLocked publishes a view whose differences from the one last
// published lie in its spans, at its LSN (above the last one), in blocks
// of the published size: it compares and rebuilds only the blocks the
// spans reach. The caller holds t.mu.
func (t *LeaseTable) publishSpansLocked(ns string, sp *space, v *view) {
	bits := sp.bits
	nb := uint32(1) << bits
	width := uint64(1) << (64 - bits)
	dirty := make([]uint64, (nb+63)/64)
	for _, s := range v.spans {
		if s.off >= -width {
			// Round the circle, but for less than a block.
			for i := range dirty {
				dirty[i] = ^uint64(0)
			}
			break
		}
		b, last := wire.BlockOf(s.lo, bits), wire.BlockOf(s.lo+s.off, bits)
		for {
			dirty[b/64] |= 1 << (b % 64)
			if b == last {
				break
			}
			b = (b + 1) & (nb - 1)
		}
	}
	version := strconv.FormatUint(v.lsn, 10)
	set := map[string]*resource{}
	type update struct {
		b  uint32
		es []lease.Entry
	}
	var updates []update
	for b := range nb {
		if dirty[b/64]&(1<<(b%64)) == 0 {
			continue
		}
		es := blockOf(*v.lv, b, bits)
		if slices.Equal(sp.blocks[b], es) {
			continue
		}
		if err := validEntries(es); err != nil {
			t.badViews.Add(1)
			t.log.Error("refusing namespace view", "ns", ns, "version", v.lsn, "err", err)
			return
		}
		name := wire.BlockName(ns, b)
		r, err := newResource(name, version, wire.ArcBlock(ns, bits, b, es))
		if err != nil {
			t.badViews.Add(1)
			t.log.Error("refusing namespace view", "ns", ns, "version", v.lsn, "err", err)
			return
		}
		set[name] = r
		updates = append(updates, update{b, es})
	}
	for _, u := range updates {
		sp.blocks[u.b] = u.es
	}
	t.flushes.Add(1)
	sp.lsn = v.lsn
	// Even a view that changes no block advances the cache's version (see
	// publishViewLocked).
	sp.caches[ArcBlockTypeURL].update(version, set, nil)
}

// blockOf returns the entries of view that end in block b of 2^bits, in
// ring order, in a new slice.
func blockOf(view lease.View, b, bits uint32) []lease.Entry {
	var es []lease.Entry
	view.Walk(uint64(b)<<(64-bits), func(e lease.Entry) bool {
		if wire.BlockOf(e.Range.End, bits) != b {
			return false
		}
		es = append(es, e)
		return true
	})
	return slices.Clip(es)
}
