package proxy

import (
	"math/bits"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Stats counts what a Proxy did.
type Stats struct {
	// Responses counts responses by status class: Responses[2] is 2xx,
	// through Responses[5], 5xx (including the proxy's own 4xx and 5xx).
	Responses [6]uint64
	// Attempts counts requests sent, or tried to be sent, to owners.
	Attempts uint64
	// Retries counts attempts after a request's first.
	Retries uint64
	// Misroutes counts 421 Misdirected Request answers from owners.
	Misroutes uint64
	// Refused counts attempts that never reached an owner (connection
	// refused or failed, no free connection).
	Refused uint64
	// UpstreamErrors counts attempts that failed after the request may have
	// been sent (timeouts, resets, malformed responses).
	UpstreamErrors uint64
	// GiveUps counts requests answered 503 or 502 because the retry budget
	// ran out.
	GiveUps uint64
	// Pipelined counts attempts written behind others on a busy owner
	// connection (Config.PipelineDepth).
	Pipelined uint64
	// Spins counts attempts that, alone in flight, polled their owner's
	// socket for the answer instead of sleeping (Config.SpinWait), and
	// SpinAnswered those of them whose answer came while polling.
	Spins, SpinAnswered uint64
	// Owners is the number of owner connection pools held.
	Owners int
	// RefusedConns counts client connections closed at once because their
	// address held MaxConnsPerIP already.
	RefusedConns uint64
}

// counters are the Proxy's counters; Stats and /metrics read them. Those
// counted per request are sharded by client connection, each shard on
// cache lines of its own, so that requests on different cores do not
// bounce one line between them; readers sum the shards.
type counters struct {
	shards                  [counterShards]counterShard
	abandoned, refusedConns atomic.Uint64 // rare: not sharded
}

const counterShards = 16

type counterShard struct {
	responses                        [6]atomic.Uint64
	attempts, retries, misroutes     atomic.Uint64
	refused, upstreamErrors, giveUps atomic.Uint64
	pipelined                        atomic.Uint64
	_                                [128 - 13*8]byte
}

// shard returns the shard of client connection id.
func (c *counters) shard(id uint64) *counterShard { return &c.shards[id%counterShards] }

// sum adds up one counter over the shards.
func (c *counters) sum(f func(*counterShard) *atomic.Uint64) uint64 {
	var n uint64
	for i := range c.shards {
		n += f(&c.shards[i]).Load()
	}
	return n
}

// status counts a response.
func (s *counterShard) status(code int) {
	if k := code / 100; k >= 1 && k <= 5 {
		s.responses[k].Add(1)
	}
}

// latencyBuckets are the upstream latency histogram's upper bounds: 100 µs
// doubling to 3.3 s, and +Inf.
const latencyBuckets = 16

// latencyCounts is a histogram of upstream latencies. Each owner
// connection keeps its own, written only by the request it carries, and
// /metrics sums them (connPool.latency): observing costs no shared write.
type latencyCounts struct {
	buckets [latencyBuckets + 1]atomic.Uint64 // non-cumulative; the last is +Inf
	sumNs   atomic.Uint64
}

// observe counts one latency.
func (l *latencyCounts) observe(d time.Duration) {
	l.buckets[latencyBucket(d)].Add(1)
	l.sumNs.Add(uint64(max(d, 0)))
}

// latencyBucket is the index of the first bucket whose bound d does not
// exceed: bound i is 100 µs << i.
func latencyBucket(d time.Duration) int {
	const base = int64(100 * time.Microsecond)
	if int64(d) <= base {
		return 0
	}
	return min(bits.Len64(uint64((int64(d)-1)/base)), latencyBuckets)
}

func (l *latencyCounts) addFrom(o *latencyCounts) {
	for i := range l.buckets {
		l.buckets[i].Add(o.buckets[i].Load())
	}
	l.sumNs.Add(o.sumNs.Load())
}

// metrics is the Proxy's Prometheus registry, of its own so that several
// proxies can run in one process (tests).
type metrics struct {
	reg *prometheus.Registry
}

func newMetrics(c *counters, spin *spinner, healthy func() bool, owners func() int, latency func(func(addr string, l *latencyCounts))) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, v func() uint64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fuge_proxy_" + name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v()) })
	}
	sharded := func(f func(*counterShard) *atomic.Uint64) func() uint64 { return func() uint64 { return c.sum(f) } }
	for k := 1; k <= 5; k++ {
		m.reg.MustRegister(counter("requests_total", "Requests answered, by status class.",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.responses[k] }),
			prometheus.Labels{"code": strconv.Itoa(k) + "xx"}))
	}
	m.reg.MustRegister(
		counter("attempts_total", "Requests sent, or tried to be sent, to owners.",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.attempts }), nil),
		counter("retries_total", "Attempts after a request's first.",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.retries }), nil),
		counter("misroutes_total", "421 Misdirected Request answers from owners.",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.misroutes }), nil),
		counter("refused_total", "Attempts that never reached an owner (connection failed, no free connection).",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.refused }), nil),
		counter("upstream_errors_total", "Attempts that failed after the request may have been sent.",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.upstreamErrors }), nil),
		counter("abandoned_connections_total", "Connections to owners that left the lease table, closed with any attempt waiting on them.", c.abandoned.Load, nil),
		counter("refused_client_conns_total", "Client connections refused because their address held MaxConnsPerIP already.", c.refusedConns.Load, nil),
		counter("pipelined_total", "Attempts written behind others on a busy connection to an owner (HTTP/1.1 pipelining).",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.pipelined }), nil),
		counter("spins_total", "Attempts that, alone in flight, polled their owner's socket for the answer instead of sleeping (--spin-wait).", spin.spins.Load, nil),
		counter("spin_answered_total", "Attempts whose answer came while they polled for it (--spin-wait).", spin.answered.Load, nil),
		counter("give_ups_total", "Requests answered 503 or 502 after the retry budget ran out.",
			sharded(func(s *counterShard) *atomic.Uint64 { return &s.giveUps }), nil),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fuge_proxy_healthy", Help: "1 when the balancer has a table."},
			func() float64 {
				if healthy() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fuge_proxy_owner_pools", Help: "Owner connection pools held."},
			func() float64 { return float64(owners()) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.reg.MustRegister(&latencyCollector{
		desc: prometheus.NewDesc("fuge_proxy_upstream_seconds",
			"Time from sending a request to an owner to its response or error, by owner address.", []string{"owner"}, nil),
		each: latency,
	})
	return m
}

// latencyCollector exports every owner's latencyCounts as a histogram.
type latencyCollector struct {
	desc *prometheus.Desc
	each func(func(addr string, l *latencyCounts))
}

func (lc *latencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lc.desc }

func (lc *latencyCollector) Collect(ch chan<- prometheus.Metric) {
	lc.each(func(addr string, l *latencyCounts) {
		buckets := make(map[float64]uint64, latencyBuckets)
		var n uint64
		for i := range latencyBuckets {
			n += l.buckets[i].Load()
			buckets[float64(100*time.Microsecond<<i)/float64(time.Second)] = n
		}
		n += l.buckets[latencyBuckets].Load()
		ch <- prometheus.MustNewConstHistogram(lc.desc, n, float64(l.sumNs.Load())/1e9, buckets, addr)
	})
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }
