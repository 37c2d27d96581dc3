package manager

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fuge-project/fuge/lease"
)

// dashCollector exports what the Grafana dashboard (deploy/grafana) shows
// beyond the core counters: this node's raft state and term, what each
// owner holds in the replicated view (every node, no call to the leader's
// loop), and the event streams open on this node.
type dashCollector struct{ s *Server }

var (
	raftStateDesc = prometheus.NewDesc("fuge_raft_state", "1 for this node's raft state (leader, follower, candidate, shutdown), 0 for the others.",
		[]string{"state"}, nil)
	raftTermDesc    = prometheus.NewDesc("fuge_raft_term", "This node's current raft term.", nil, nil)
	ownerRangesDesc = prometheus.NewDesc("fuge_owner_ranges", "Ranges of the lookups' view held by each owner (adjacent arcs of one generation are one range).",
		[]string{"namespace", "owner"}, nil)
	ownerShareDesc = prometheus.NewDesc("fuge_owner_key_share", "Fraction of the key space each owner holds in the lookups' view.",
		[]string{"namespace", "owner"}, nil)
	eventSubsDesc    = prometheus.NewDesc("fuge_event_streams", "Event streams (GET /v1/events, the dashboard) open on this node.", nil, nil)
	eventDroppedDesc = prometheus.NewDesc("fuge_event_streams_dropped_total", "Event streams cut off because their client fell behind.", nil, nil)
)

func (c *dashCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{raftStateDesc, raftTermDesc, ownerRangesDesc, ownerShareDesc, eventSubsDesc, eventDroppedDesc} {
		ch <- d
	}
}

func (c *dashCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if s.raft != nil {
		st := s.raft.State()
		for _, x := range []raft.RaftState{raft.Leader, raft.Follower, raft.Candidate, raft.Shutdown} {
			v := 0.0
			if x == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(raftStateDesc, prometheus.GaugeValue, v, roleName(x))
		}
		ch <- prometheus.MustNewConstMetric(raftTermDesc, prometheus.GaugeValue, float64(s.raft.CurrentTerm()))
	}
	for _, h := range s.fsm.holdings() {
		ch <- prometheus.MustNewConstMetric(ownerRangesDesc, prometheus.GaugeValue, float64(h.ranges), h.ns, h.owner)
		ch <- prometheus.MustNewConstMetric(ownerShareDesc, prometheus.GaugeValue, h.share, h.ns, h.owner)
	}
	ch <- prometheus.MustNewConstMetric(eventSubsDesc, prometheus.GaugeValue, float64(s.events.nsubs.Load()))
	ch <- prometheus.MustNewConstMetric(eventDroppedDesc, prometheus.CounterValue, float64(s.events.dropped.Load()))
}

type holding struct {
	ns, owner string
	ranges    int
	share     float64
}

// holdings sums the replicated view per namespace and owner: every owner
// with a session, and any other holder of a range (an ended incarnation's
// orphans). O(ranges) under the read lock.
func (f *fsm) holdings() []holding {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []holding
	for _, name := range sortedKeys(f.st.Namespaces) {
		st := f.st.Namespaces[name]
		idx := map[string]int{}
		for _, o := range st.Owners {
			idx[o.Name] = len(out)
			out = append(out, holding{ns: name, owner: o.Name})
		}
		st.Entries.Each(func(e lease.Entry) {
			if e.Owner == "" {
				return
			}
			i, ok := idx[e.Owner]
			if !ok {
				i = len(out)
				idx[e.Owner] = i
				out = append(out, holding{ns: name, owner: e.Owner})
			}
			out[i].ranges++
			out[i].share += e.Range.Share()
		})
	}
	return out
}
