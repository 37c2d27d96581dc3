package ownerguard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// TestLoadMeterHotKeys: the meter's report names the keys that carry a
// large part of the load, with their rates, from the sampled requests: a
// mix (seeded; the seed is printed) of two hot keys and a spread
// of 50,000 keys, counted over 10 s. The hot keys' rates are within 10% of
// the truth, and no spread key is reported above a request a second.
func TestLoadMeterHotKeys(t *testing.T) {
	seed := uint64(1)
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	o := &Owner{}
	t0 := time.Unix(1000, 0)
	o.load.sample(t0, time.Second)
	a, b := ring.HashString("hot-a"), ring.HashString("hot-b")
	spread := make([]uint64, 50_000)
	for i := range spread {
		spread[i] = ring.HashString(fmt.Sprint("cold-", i))
	}
	const n = 200_000 // over 10 s: 20,000 requests a second
	var na, nb int
	for range n {
		switch x := rng.Float64(); {
		case x < 0.3:
			o.CountRequest(a)
			na++
		case x < 0.4:
			o.CountRequest(b)
			nb++
		default:
			o.CountRequest(spread[rng.IntN(len(spread))])
		}
	}
	// A window far shorter than the 10 s: the report is the last interval's rate.
	o.load.sample(t0.Add(10*time.Second), time.Millisecond)
	l := o.load.measured()
	if len(l.Hot) == 0 || len(l.Hot) > lease.MaxHotKeys || l.Validate() != nil {
		t.Fatalf("report %+v (%v)", l.Hot, l.Validate())
	}
	want := map[uint64]float64{a: float64(na) / 10, b: float64(nb) / 10}
	for i, k := range l.Hot {
		if w, ok := want[k.Hash]; ok {
			if i > 1 || math.Abs(k.Rate-w) > 0.1*w {
				t.Errorf("hot[%d] = %v/s; want %v/s among the first two", i, k.Rate, w)
			}
			delete(want, k.Hash)
		} else if k.Rate > 20 {
			t.Errorf("hot[%d]: a spread key at %v/s (each has about 2.4/s)", i, k.Rate)
		}
	}
	if len(want) != 0 {
		t.Errorf("hot keys missing from the report: %v in %+v", want, l.Hot)
	}
	// The keys' rates fade as the groups' do once they get no requests.
	o.load.sample(t0.Add(20*time.Second), time.Millisecond)
	if l := o.load.measured(); len(l.Hot) != 0 {
		t.Errorf("after a quiet interval: %+v", l.Hot)
	}
}

// TestLoadMeterTracksBoundedKeys: however many distinct keys are sampled,
// the meter keeps at most hotTracked of them.
func TestLoadMeterTracksBoundedKeys(t *testing.T) {
	o := &Owner{}
	t0 := time.Unix(1000, 0)
	o.load.sample(t0, time.Second)
	for i := range 100_000 {
		o.CountRequest(ring.HashString(fmt.Sprint("k", i)))
	}
	o.load.sample(t0.Add(time.Second), time.Second)
	if len(o.load.hot) > hotTracked {
		t.Fatalf("%d keys tracked, want at most %d", len(o.load.hot), hotTracked)
	}
}

func BenchmarkCountRequest(b *testing.B) {
	o := &Owner{}
	h := ring.HashString("user-1")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		o.CountRequest(h + uint64(i)<<40)
	}
}
