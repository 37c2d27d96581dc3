package manager_test

import (
	"fmt"
	"testing"
	"time"
)

// prsOwners is PRS's pool size (§7.1): 500 owners.
const prsOwners = 500

// ownerName is the name of owner i of a benchmark pool.
func ownerName(i int) string { return fmt.Sprintf("o%04d", i) }

// convergedPool returns a cluster of n owners at ring size r, converged.
func convergedPool(tb testing.TB, r, n int) *cluster {
	tb.Helper()
	c := newCluster(tb, r)
	for i := range n {
		c.addOwner(ownerName(i), uint64(i+1))
	}
	c.run(10 * time.Minute)
	return c
}

// BenchmarkRequest measures the manager's lease core handling owner
// requests in a pool of 500 owners that hold the whole ring of R entries:
//
//   - renew: one owner's periodic request, which changes nothing (the
//     manager's side alone);
//   - join: a 501st owner joins, and the pool converges again (every
//     request and response of the recalls, releases and grants, the
//     owners' and the lookup's work included; manager-ns/op is the
//     manager's share, the time in its Request, which a leader's loop
//     spends one request after another);
//   - joinstep: the 501st owner's first request alone, which recalls
//     what it is to get;
//   - drain: one owner is drained, and the pool converges again;
//   - storm: 500 owners join an empty namespace at once and converge.
func BenchmarkRequest(b *testing.B) {
	for _, r := range []int{4096, 65536} {
		c := convergedPool(b, r, prsOwners)
		b.Run(fmt.Sprintf("renew/R=%d", r), func(b *testing.B) {
			benchRenew(b, c)
		})
		b.Run(fmt.Sprintf("release/R=%d", r), func(b *testing.B) {
			// One owner's request that releases one arc, which the same
			// step grants back under a new generation (it is still the
			// arc's desired owner) and commits: the manager's side of the
			// smallest change, as each of the owners answering a join's
			// recall makes one.
			o := c.owners[ownerName(11)]
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				req := *o.Resend(c.now).Send
				req.Held = req.Held[1:]
				b.StartTimer()
				out, err := c.m.Request(req, c.now)
				b.StopTimer()
				if err != nil || len(out.Commits) == 0 {
					b.Fatalf("release: err %v, %d commits", err, len(out.Commits))
				}
				c.managerOut(out)
				c.run(10 * time.Minute)
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("join/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			var inManager time.Duration
			for b.Loop() {
				b.StopTimer()
				c := convergedPool(b, r, prsOwners)
				c.inManager = 0
				b.StartTimer()
				c.addOwner(ownerName(prsOwners), prsOwners+1)
				c.run(10 * time.Minute)
				inManager += c.inManager
			}
			b.ReportMetric(float64(inManager.Nanoseconds())/float64(b.N), "manager-ns/op")
		})
		b.Run(fmt.Sprintf("joinstep/R=%d", r), func(b *testing.B) {
			// The joining owner's first request alone: the step that
			// reapportions the ring, recalls from the owners that lose
			// entries and commits; join is that and all that follows.
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c := convergedPool(b, r, prsOwners)
				c.addOwner(ownerName(prsOwners), prsOwners+1)
				first := c.queue
				c.queue = nil
				b.StartTimer()
				for _, f := range first {
					f()
				}
			}
		})
		b.Run(fmt.Sprintf("recalled/R=%d", r), func(b *testing.B) {
			// The owners' answers to a join's recalls, each leaving out
			// the arcs its message recalled (releasesMessage):
			// manager-ns/answer is the time in the manager's Request per
			// answer. The joining owner's first request, the owners' Step
			// and everything after the answers are not timed. Each
			// iteration is one more owner joining the same pool.
			c := convergedPool(b, r, prsOwners)
			answers, released, fast := 0, c.m.Stats().Releases, c.m.Stats().FastReleases
			var inManager time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				c.addOwner(ownerName(prsOwners+i), uint64(prsOwners+i+1))
				for range 2 { // the join's request, then the owners' Step
					q := c.queue
					c.queue = nil
					for _, f := range q {
						f()
					}
				}
				q := c.queue // the answers
				c.queue = nil
				before := c.inManager
				b.StartTimer()
				for _, f := range q {
					f()
				}
				b.StopTimer()
				inManager += c.inManager - before
				answers += len(q)
				c.run(10 * time.Minute)
				b.StartTimer()
			}
			if c.m.Stats().Releases == released || answers == 0 {
				b.Fatal("no recall was answered")
			}
			b.ReportMetric(float64(answers)/float64(b.N), "answers/op")
			b.ReportMetric(float64(c.m.Stats().FastReleases-fast)/float64(b.N), "fast-releases/op")
			b.ReportMetric(float64(inManager.Nanoseconds())/float64(answers), "manager-ns/answer")
		})
		b.Run(fmt.Sprintf("drain/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			var inManager time.Duration
			for b.Loop() {
				b.StopTimer()
				c := convergedPool(b, r, prsOwners)
				b.StartTimer()
				c.inManager = 0
				t0 := time.Now()
				out, err := c.m.Drain(benchNS, ownerName(3), c.now)
				if err != nil {
					b.Fatal(err)
				}
				c.inManager += time.Since(t0)
				c.managerOut(out)
				c.run(10 * time.Minute)
				inManager += c.inManager
			}
			b.ReportMetric(float64(inManager.Nanoseconds())/float64(b.N), "manager-ns/op")
		})
		b.Run(fmt.Sprintf("storm/R=%d", r), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				convergedPool(b, r, prsOwners)
			}
		})
	}
}

// BenchmarkStorm10x measures ten times PRS's pool joining an empty
// namespace at once: 5,000 owners at R = 8192 (make bench-manager
// SCALE=10's start-up), the pure cores only. Each join reapportions the
// ring among all the owners before it, so its cost per join is what grows.
func BenchmarkStorm10x(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		convergedPool(b, 8192, 10*prsOwners)
	}
}

// BenchmarkRenewAfterStorm10x is renew after BenchmarkStorm10x's storm:
// one owner's renewal in the converged pool of 5,000 owners at R = 8192,
// the leader's steady state at make bench-manager SCALE=10. Whatever the
// storm left behind (a set grown to thousands of names) shows here.
func BenchmarkRenewAfterStorm10x(b *testing.B) {
	benchRenew(b, convergedPool(b, 8192, 10*prsOwners))
}

// benchRenew measures one owner's renewal in the converged pool c, the
// manager's side alone, checking that it changes nothing.
func benchRenew(b *testing.B, c *cluster) {
	o := c.owners[ownerName(7)]
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		req := *o.Resend(c.now).Send
		b.StartTimer()
		out, err := c.m.Request(req, c.now)
		b.StopTimer()
		if err != nil || len(out.Commits) > 0 || len(out.Send) != 1 {
			b.Fatalf("renewal: err %v, %d commits, %d messages", err, len(out.Commits), len(out.Send))
		}
		if o.Step(out.Send[0], c.now).Send != nil {
			b.Fatal("a renewal changed what the owner holds")
		}
		b.StartTimer()
	}
}
