package lb

import (
	"slices"
	"testing"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// migrated is ent marked as continuing the state of generation from.
func migrated(e lease.Entry, from lease.Gen) lease.Entry { e.MigratedFrom = from; return e }

// Over xDS a lookup only ever sees tables (snapshots): an arc whose new
// generation continues the one it knew is no loss; one that continues
// another generation is, since a loss may have come in between.
func TestSnapshotMigratedArcsNotifyNoLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		next []lease.Entry
		want []ring.Range
	}{
		{"migrated from the generation known",
			[]lease.Entry{migrated(ent(3*q, q, "c", 4), 1), ent(q, 2*q, "b", 2), ent(2*q, 3*q, "", 3)}, nil},
		{"migrated from a generation the lookup never saw",
			[]lease.Entry{migrated(ent(3*q, q, "c", 5), 4), ent(q, 2*q, "b", 2), ent(2*q, 3*q, "", 3)}, []ring.Range{rg(3*q, q)}},
		{"plain handoff",
			[]lease.Entry{ent(3*q, q, "c", 4), ent(q, 2*q, "b", 2), ent(2*q, 3*q, "", 3)}, []ring.Range{rg(3*q, q)}},
		{"a failed import's regrant",
			[]lease.Entry{ent(3*q, q, "c", 6), migrated(ent(q, 2*q, "c", 7), 2), ent(2*q, 3*q, "", 3)}, []ring.Range{rg(3*q, q)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(t)
			c.Start(at(0))
			c.Step(snap(7, 1, base...), at(0))
			out := c.Step(snap(7, 2, tc.next...), at(1))
			if !slices.Equal(out.Loss, tc.want) {
				t.Errorf("loss = %v, want %v", out.Loss, tc.want)
			}
		})
	}
}

// Changes (the in-process protocol) carry MigratedFrom too: a change that
// says it continues the generation known raises nothing, even unflagged.
func TestChangeMigratedFromKnownGeneration(t *testing.T) {
	c := newCore(t)
	c.Start(at(0))
	c.Step(snap(7, 1, base...), at(0))
	out := c.Step(delta(7, 1, 2, chg(migrated(ent(q, 2*q, "c", 9), 2))), at(1))
	if len(out.Loss) != 0 {
		t.Errorf("loss = %v for a migrated change", out.Loss)
	}
	out = c.Step(delta(7, 2, 3, chg(migrated(ent(q, 2*q, "a", 11), 10))), at(2))
	if want := []ring.Range{rg(q, 2*q)}; !slices.Equal(out.Loss, want) {
		t.Errorf("loss = %v, want %v: migrated from a generation never seen", out.Loss, want)
	}
}
