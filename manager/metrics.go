package manager

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are a node's Prometheus metrics, in a registry of its own so that
// several nodes can run in one process (tests).
type metrics struct {
	s             *Server
	reg           *prometheus.Registry
	grants        prometheus.Counter
	recalls       prometheus.Counter
	expiries      prometheus.Counter
	droppedRacing prometheus.Counter
	sendDropped   prometheus.Counter
	leaderChanges prometheus.Counter
	ownerStreams  prometheus.Gauge
	appliedIndex  prometheus.Gauge
	commitLatency prometheus.Histogram
	nudges        prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{s: s, reg: prometheus.NewRegistry()}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Name: "fuge_" + name, Help: help})
		m.reg.MustRegister(x)
		return x
	}
	m.grants = c("grants_total", "Leases granted by this node while leader.")
	m.recalls = c("recalls_total", "Leases recalled by this node while leader.")
	m.expiries = c("expiries_total", "Leases that expired without renewal.")
	m.droppedRacing = c("dropped_racing_total", "Owner requests dropped by the sequence-number race filter.")
	m.sendDropped = c("send_dropped_total", "Responses dropped because an owner stream was full.")
	m.leaderChanges = c("leader_takeovers_total", "Times this node became leader.")
	m.nudges = c("raft_commit_nudges_total", "Barriers appended after commits so that followers learn the commit index at once.")
	m.ownerStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "fuge_owner_streams", Help: "Open owner streams on this node."})
	m.appliedIndex = prometheus.NewGauge(prometheus.GaugeOpts{Name: "fuge_raft_applied_index", Help: "Last raft index applied to the state machine."})
	m.commitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fuge_raft_commit_seconds", Help: "Time to commit a raft entry on the leader.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.reg.MustRegister(m.ownerStreams, m.appliedIndex, m.commitLatency, &tableCollector{s: s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.cfg.LookupStreams != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fuge_lookups_connected", Help: "Lookup streams open on this node."},
			func() float64 { return float64(s.cfg.LookupStreams()) }))
	}
	if s.cfg.XDSNACKs != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fuge_xds_nacks_total", Help: "xDS requests that rejected a response (error_detail set)."},
			func() float64 { return float64(s.cfg.XDSNACKs()) }))
	}
	if f := s.cfg.XDSWholeTables; f != nil {
		m.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fuge_xds_whole_table_waits_total",
				Help: "Whole tables a Lookup stream waited to be sent (a slot of the 64 sent at once)."},
				func() float64 { w, _ := f(); return float64(w) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fuge_xds_whole_table_bypasses_total",
				Help: "Whole tables sent without a slot after their stream waited 2 s: slots held by clients that do not acknowledge, or a start-up longer than that."},
				func() float64 { _, b := f(); return float64(b) }))
	}
	return m
}

func (m *metrics) applied(index uint64) { m.appliedIndex.Set(float64(index)) }

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// tableCollector reports owners and arcs per state from the leader's core.
type tableCollector struct{ s *Server }

var (
	ownersDesc = prometheus.NewDesc("fuge_owners", "Live owner sessions.", []string{"namespace"}, nil)
	arcsDesc   = prometheus.NewDesc("fuge_arcs", "Lease-table arcs by state.", []string{"namespace", "state"}, nil)
)

func (t *tableCollector) Describe(ch chan<- *prometheus.Desc) { ch <- ownersDesc; ch <- arcsDesc }

func (t *tableCollector) Collect(ch chan<- prometheus.Metric) {
	t.s.mu.Lock()
	l := t.s.leader
	t.s.mu.Unlock()
	if l == nil {
		return
	}
	var ms []prometheus.Metric
	_ = l.do(func() error {
		for _, nc := range l.core.Namespaces() {
			os, _ := l.core.Owners(nc.Name)
			ms = append(ms, prometheus.MustNewConstMetric(ownersDesc, prometheus.GaugeValue, float64(len(os)), nc.Name))
			counts := map[State]int{}
			arcs, _ := l.core.Leases(nc.Name)
			for _, a := range arcs {
				counts[a.State]++
			}
			for _, st := range []State{Free, Granted, Recalling} {
				ms = append(ms, prometheus.MustNewConstMetric(arcsDesc, prometheus.GaugeValue, float64(counts[st]), nc.Name, st.String()))
			}
		}
		return nil
	})
	for _, m := range ms {
		ch <- m
	}
}
