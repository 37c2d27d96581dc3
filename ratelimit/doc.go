// Package ratelimit is fleet-wide rate limiting without a central service:
// every proxy decides each request locally, and the proxies of a view
// estimate the fleet's demand by gossip (distributed rate limiting, DRL,
// over the views of Webb et al., seeds/004; ../shared/notes/drl.md).
//
// # The model
//
// A Limit gives every value of a key (a tenant's header) L requests per
// period across the fleet, as a token bucket of depth B. Each proxy runs
// a Limiter per Limit: a bucket per key value, kept as GCRA's theoretical
// arrival time in one atomic word, so Limiter.Allow is a hash, a probe of
// a lock-free open-addressing table and a compare-and-swap: no lock, no
// allocation (BenchmarkAllow: about 30 ns on the development machine).
//
// A Node holds a proxy's limiters and its push-sum state, as a pure core
// in the style of the manager's: the shell calls Tick once an epoch (500
// ms by default) and sends what it returns, feeds received messages to
// Receive and sends back its acknowledgements, and installs the views the
// manager commits with SetView. Nothing reads a clock: Tick and Allow take
// the time.
//
// Each epoch a node measures every key's demand D_i (arrivals per second,
// smoothed), and push-sum estimates ΣD over the view's members: the node
// keeps a sum s (its share of the demand mass) and a weight w, adds its
// demand's changes to s, keeps 1/(b+1) of both and pushes 1/(b+1) to each
// of b peers. n·s/w converges to ΣD (Kempe, Dobra, Gehrke 2003). The
// node then admits its flow-proportional share (FPS) of the view's part of
// L: L · |V|/N_registered · D_i/ΣD, smoothed by an EWMA, with a floor of 1%
// of L/|V| in D_i so that an idle proxy's first requests are not all
// refused. Bucket depths are split the same way (at least 2 tokens).
//
// # Loss, duplication, reordering
//
// Plain push-sum loses the mass of a lost message, and the estimate is
// biased for the rest of the view (TestHarnessPlainIsBiased,
// TestConservationPlainFails). Here a node sends each peer the cumulative
// sums it has ever pushed on that link, with a sequence number; the peer
// applies the difference from the last sums it applied, ignores anything
// not newer, and acknowledges the newest sequence number it applied. A
// lost message is made good by the next one on the link; a duplicate or a
// late one is ignored; a link whose newest sums are unacknowledged is
// re-sent every epoch. So the mass at the nodes plus the mass in flight
// always equals what the nodes injected (TestConservation), and a lost
// acknowledgement costs one resend, never mass (Hadjicostis, Vaidya and
// Domínguez-García 2015; Flow-Updating).
//
// # Overlay
//
// Each epoch every member pushes to the b members after it in a random
// cyclic order of the view that all members derive from the seed, the view
// id and the epoch's number on the clock: every member hears from exactly
// b others an epoch (if the shells tick at the epoch's boundaries, as
// fuge-proxy does). With b random peers instead, 13% of members hear from
// nobody in an epoch (e^-2 at b=2); their weight falls threefold each such
// epoch, and the noise of their own demand measurements, divided by that
// weight, swung the largest error of 500 limiters between 3% and 40% from
// one epoch to the next; with the cycle it stays near 1%.
//
// # Views
//
// A view {id, members, N_registered} comes from the manager (committed
// through raft). A node drops gossip of any other view; a new view restarts
// push-sum from (D_i, 1), whose first estimate n·D_i gives every member
// L/N_registered, the panic share. A node in no view (none yet, left out,
// or its registration lost) applies the limit's OnNoView policy:
// PanicShare, L/N_registered per proxy, so that however a partition splits
// the fleet it admits at most L in all (plus the bursts); FailOpen; or
// FailClosed.
//
// # Figures
//
// RunHarness is the deterministic in-process harness (TestHarnessQuick in
// make test; TestHarnessLong with -long): 500 limiters with Zipf demand at
// 3x L on one key, a transport that drops, duplicates (5%) and delays past
// an epoch (10%), and a view change that leaves out 5% of the members.
// Epochs until every member's estimate is within 5% and the view's
// admitted rate within ±5% of its part of L: 11 at 0 and 5% loss, 14-16 at
// 20% loss (three seeds); steady admitted/limit 1.000; the left-out members
// admit 1.000 of their panic share. 50 limiters: 9 (5% loss), 11 (20%).
// Plain push-sum under 20% loss never converges in the same run.
//
// On real processes (bench/ratelimit, make bench-ratelimit: 10
// fuge-proxies, Zipf tenants, a hot spot moving every 10 s) the over-limit
// tenants get 0.96-0.99 of L in steady state, 0.97-0.98 at 20% gossip
// loss, against 0.89 for the static L/N split. Most of the shortfall is
// the hot spot: the proxy whose demand jumps adds its whole increase to
// its own push-sum sum, so for 2-4 epochs its estimate of the total counts
// that increase about n times and it under-allocates itself, until gossip
// spreads the mass (the dips at 10 s and 20 s of faults.png).
//
// Limits: keys beyond a Limit's MaxKeys share one bucket at the panic
// share, and are not gossiped; keys idle for 8 epochs are evicted once the
// table is three quarters full. A Limit's bursts are split by share, but
// each limiter keeps at least 2 tokens, so a partition can admit up to
// L + B + 2·N_registered in a period.
package ratelimit
