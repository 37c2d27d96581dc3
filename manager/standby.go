package manager

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fuge-project/fuge/api/wire"
)

// StandbyTrailer is the gRPC trailer in which the leader names a standby
// when it leaves a Lookup stream to the standbys.
const StandbyTrailer = "fuge-standby"

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

// CheckLookup is the gate for Lookup streams (xds.LeaseTableConfig.Gate).
// A standby admits them while ServesLookups, and otherwise refuses with
// CheckLeader's FAILED_PRECONDITION, which names the leader in the
// "fuge-leader" trailer. The leader, which alone carries every owner's
// stream and every commit, leaves Lookups to its standbys as read replicas
// take reads from a primary: while a standby is in contact (raft's
// heartbeats to it succeed) and ServerConfig.LeaderServesLookups is off, it
// refuses with UNAVAILABLE and names one of them, in turn, in the
// "fuge-standby" trailer; with no standby in contact, or for a Lookup that
// could not reach the standby named (wire.LeaderFallbackKey), it serves
// them.
func (s *Server) CheckLookup(ctx context.Context) error {
	if s.IsLeader() {
		if askedLeader(ctx) {
			return nil
		}
		if addr := s.lookupStandby(); addr != "" {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(StandbyTrailer, addr))
			return status.Errorf(codes.Unavailable, "%v; standby: %q", ErrLookupsOnStandbys, addr)
		}
		return nil
	}
	if s.ServesLookups() {
		return nil
	}
	return s.CheckLeader(ctx)
}

// StandbysInContact returns the IDs of the standbys this node's raft
// heartbeats reach while it leads, sorted; none on a standby.
func (s *Server) StandbysInContact() []string {
	if !s.IsLeader() {
		return nil
	}
	return s.peers.inContact()
}

// askedLeader reports whether a Lookup asks the leader to serve it
// (wire.LeaderFallbackKey): a standby the leader named did not.
func askedLeader(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(wire.LeaderFallbackKey)) > 0
}

// lookupStandby returns the gRPC address of a standby in contact with this
// leader to send a Lookup to, the next one in turn, or "" when the leader
// serves Lookups itself.
func (s *Server) lookupStandby() string {
	if s.cfg.LeaderServesLookups {
		return ""
	}
	ids := s.peers.inContact()
	for range ids {
		i := s.peers.turn.Add(1) % uint64(len(ids))
		if n, ok := s.fsm.node(ids[i]); ok && n.GRPCAddr != "" {
			return n.GRPCAddr
		}
	}
	return ""
}

// handOffLookups runs every heartbeat interval on the leader: while a
// standby is in contact (and LeaderServesLookups is off), it marks a sixth
// of the Lookup streams this node serves (those it took as a standby, or
// while it had no standby) to ask CheckLookup again at their next request,
// which sends them to a standby. A new leader so hands its Lookups off
// within about six heartbeat intervals (one lease duration by default), a
// share at a time rather than all at once.
func (s *Server) handOffLookups() {
	if s.cfg.LeaderServesLookups || s.cfg.RecheckLookups == nil || len(s.peers.inContact()) == 0 {
		return
	}
	s.cfg.RecheckLookups(handOffShares)
}

// handOffShares is how many heartbeat intervals handOffLookups spreads a
// leader's Lookups over.
const handOffShares = 6

// peerContact is the leader's view of which standbys are in contact, from
// raft's observations: a peer is in contact from the start of its
// replication until a heartbeat to it fails, and again once one succeeds.
// An observation lost to a full channel is repeated (a failing peer's
// heartbeats fail again) or errs toward the leader serving Lookups itself.
type peerContact struct {
	mu   sync.Mutex
	ok   map[raft.ServerID]bool // replicated-to peers: in contact or not
	turn atomic.Uint64
}

func (p *peerContact) inContact() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, ok := range p.ok {
		if ok {
			ids = append(ids, string(id))
		}
	}
	slices.Sort(ids)
	return ids
}

func (p *peerContact) observe(o raft.Observation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch d := o.Data.(type) {
	case raft.LeaderObservation:
		clear(p.ok) // a new leader's replication announces its peers again
	case raft.PeerObservation:
		if d.Removed {
			delete(p.ok, d.Peer.ID)
		} else {
			p.ok[d.Peer.ID] = true
		}
	case raft.FailedHeartbeatObservation:
		p.mark(d.PeerID, false)
	case raft.ResumedHeartbeatObservation:
		p.mark(d.PeerID, true)
	}
}

// mark records whether a peer being replicated to is in contact.
func (p *peerContact) mark(id raft.ServerID, ok bool) {
	if _, known := p.ok[id]; known {
		p.ok[id] = ok
	}
}

// observePeers registers for raft's observations of its peers, before
// raft can elect this node, and returns the loop that feeds them to
// s.peers until the node stops.
func (s *Server) observePeers() (loop func()) {
	ch := make(chan raft.Observation, 256)
	ob := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.PeerObservation, raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	s.raft.RegisterObserver(ob)
	return func() {
		defer s.raft.DeregisterObserver(ob)
		s.loopPeers(ch)
	}
}

func (s *Server) loopPeers(ch <-chan raft.Observation) {
	for {
		select {
		case <-s.stop:
			return
		case o := <-ch:
			s.peers.observe(o)
		}
	}
}

// RunStandbyHeartbeats calls heartbeat for each of namespaces() every
// HeartbeatInterval while this node is a standby that ServesLookups (the
// leader heartbeats from its own loop), until ctx ends. A Lookup served by
// a standby counts these heartbeats against its staleness bound: each one
// says the standby heard from the leader within raft's heartbeat timeout.
// A heartbeat due while the standby is out of contact is sent as soon as
// contact is back, checked every tenth of the interval, rather than a whole
// interval later: a Lookup abandons a stream silent for its StreamTimeout.
//
// A heartbeat due while a table change may still be going out to the
// Lookups (busy reports a view of the namespace published within the last
// tenth of the interval; nil: never) waits, by at most a quarter of the
// interval and a second (heartbeatNow). At ten times PRS's scale a standby
// heartbeats 10,000 Lookups at once, about a fifth of a second of its CPU
// and as much of theirs, and a change that met both standbys' heartbeats
// took 1.3-1.9 s to reach every Lookup instead of 0.5-0.9 s.
func (s *Server) RunStandbyHeartbeats(ctx context.Context, namespaces func() []string, heartbeat func(ns string), busy func(ns string, within time.Duration) bool) {
	every := s.cfg.HeartbeatInterval
	tick := max(every/10, time.Millisecond)
	t := time.NewTicker(tick)
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
			nss := namespaces()
			b := busy != nil && slices.ContainsFunc(nss, func(ns string) bool { return busy(ns, tick) })
			if !heartbeatNow(now, last, every, b) {
				continue
			}
			last = now
			for _, ns := range nss {
				heartbeat(ns)
			}
		}
	}
}

// heartbeatNow reports whether a standby's heartbeat goes out at now, the
// last one having gone at last (zero: none yet): once every interval, but
// put off while busy, by at most maxHeartbeatDelay.
func heartbeatNow(now, last time.Time, every time.Duration, busy bool) bool {
	since := now.Sub(last)
	switch {
	case since < every:
		return false
	case last.IsZero():
		return true
	}
	return !busy || since >= every+maxHeartbeatDelay(every)
}

// maxHeartbeatDelay is how long a heartbeat may wait for a table change
// to go out: a quarter of the interval, and not over a second, so that a
// Lookup whose StreamTimeout is set close to the interval is not left
// silent much longer than it would be by a slow network.
func maxHeartbeatDelay(every time.Duration) time.Duration { return min(every/4, time.Second) }
