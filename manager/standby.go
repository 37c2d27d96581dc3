package manager

import (
	"context"
	"time"
)

// Lookup streams on standbys (issue 13): every node keeps its xDS tables
// current as raft applies changes, so any node can serve Lookups, provided
// it is in contact with the leader. A standby that is not (partitioned, or
// the leader is gone) refuses new Lookup streams and stops its heartbeats,
// so the Lookups it serves reconnect elsewhere (StreamTimeout) before their
// staleness bound runs out.

// ServesLookups reports whether this node serves Lookup streams: the
// leader does; a standby does while it has heard from the leader within
// raft's heartbeat timeout, so the views it publishes trail the leader's by
// at most that and the time to apply what was committed.
func (s *Server) ServesLookups() bool {
	if s.IsLeader() {
		return true
	}
	if s.raft == nil {
		return false
	}
	_, lid := s.raft.LeaderWithID()
	return lid != "" && time.Since(s.raft.LastContact()) <= s.heartbeatTimeout
}

// CheckLookup is the gate for Lookup streams (xds.LeaseTableConfig.Gate):
// nil while ServesLookups, or else CheckLeader's refusal, which names the
// leader in the "fuge-leader" trailer.
func (s *Server) CheckLookup(ctx context.Context) error {
	if s.ServesLookups() {
		return nil
	}
	return s.CheckLeader(ctx)
}

// RunStandbyHeartbeats calls heartbeat for each of namespaces() every
// HeartbeatInterval while this node is a standby that ServesLookups (the
// leader heartbeats from its own loop), until ctx ends. A Lookup served by
// a standby counts these heartbeats against its staleness bound: each one
// says the standby heard from the leader within raft's heartbeat timeout.
// A heartbeat due while the standby is out of contact is sent as soon as
// contact is back, checked every tenth of the interval, rather than a whole
// interval later: a Lookup abandons a stream silent for its StreamTimeout.
func (s *Server) RunStandbyHeartbeats(ctx context.Context, namespaces func() []string, heartbeat func(ns string)) {
	every := s.cfg.HeartbeatInterval
	t := time.NewTicker(max(every/10, time.Millisecond))
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case now := <-t.C:
			if now.Sub(last) < every || s.IsLeader() || !s.ServesLookups() {
				continue
			}
			last = now
			for _, ns := range namespaces() {
				heartbeat(ns)
			}
		}
	}
}
