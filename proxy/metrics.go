package proxy

import (
	"net/http"
	"strconv"
	"sync/atomic"

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
	// Owners is the number of owner connection pools held.
	Owners int
	// RefusedConns counts client connections closed at once because their
	// address held MaxConnsPerIP already.
	RefusedConns uint64
}

// counters are the Proxy's counters; Stats and /metrics read them.
type counters struct {
	responses                        [6]atomic.Uint64
	attempts, retries, misroutes     atomic.Uint64
	refused, upstreamErrors, giveUps atomic.Uint64
	abandoned, refusedConns          atomic.Uint64
}

// status counts a response.
func (c *counters) status(code int) {
	if k := code / 100; k >= 1 && k <= 5 {
		c.responses[k].Add(1)
	}
}

// metrics is the Proxy's Prometheus registry, of its own so that several
// proxies can run in one process (tests).
type metrics struct {
	reg     *prometheus.Registry
	latency *prometheus.HistogramVec
}

func newMetrics(c *counters, healthy func() bool, owners func() int) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, v *atomic.Uint64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fuge_proxy_" + name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v.Load()) })
	}
	for k := 1; k <= 5; k++ {
		m.reg.MustRegister(counter("requests_total", "Requests answered, by status class.", &c.responses[k],
			prometheus.Labels{"code": strconv.Itoa(k) + "xx"}))
	}
	m.reg.MustRegister(
		counter("attempts_total", "Requests sent, or tried to be sent, to owners.", &c.attempts, nil),
		counter("retries_total", "Attempts after a request's first.", &c.retries, nil),
		counter("misroutes_total", "421 Misdirected Request answers from owners.", &c.misroutes, nil),
		counter("refused_total", "Attempts that never reached an owner (connection failed, no free connection).", &c.refused, nil),
		counter("upstream_errors_total", "Attempts that failed after the request may have been sent.", &c.upstreamErrors, nil),
		counter("abandoned_connections_total", "Connections to owners that left the lease table, closed with any attempt waiting on them.", &c.abandoned, nil),
		counter("refused_client_conns_total", "Client connections refused because their address held MaxConnsPerIP already.", &c.refusedConns, nil),
		counter("give_ups_total", "Requests answered 503 or 502 after the retry budget ran out.", &c.giveUps, nil),
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
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fuge_proxy_upstream_seconds",
		Help:    "Time from sending a request to an owner to its response or error, by owner address.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100 µs to 3.3 s
	}, []string{"owner"})
	m.reg.MustRegister(m.latency)
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }
