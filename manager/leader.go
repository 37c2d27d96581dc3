package manager

import (
	"context"
	"time"

	"github.com/fuge-project/fuge/api/fugev1"
	"github.com/fuge-project/fuge/api/wire"
	"github.com/fuge-project/fuge/lease"
)

// leaderState runs the lease core on the leader. One goroutine (run) owns
// the core; everything else talks to it through in. Each core output is
// committed through raft before any of its messages leave, so an owner is
// never told of an ownership change that a new leader would not know.
type leaderState struct {
	s       *Server
	core    *Manager
	in      chan func()
	done    chan struct{}
	quit    chan struct{}
	streams map[streamKey]*ownerStream
	last    Stats // core counters already added to the metrics
	// batch holds the outputs of the owner requests handled since the last
	// commit (queue): the loop commits them together, in one raft entry,
	// once no request is waiting (flush), and process commits them before
	// its own output. During a join or a leave hundreds of owners answer a
	// recall at once; one commit each made the last of them wait for all
	// the others' round trips through raft.
	batch Output
}

// maxBatch bounds the requests whose outputs are committed together, and
// maxBatchDelay how long the loop keeps adding to a batch: the first
// request's answer waits for every step in its batch, and at R = 65536
// under the race detector a step takes about a second, longer than an
// owner waits for an answer before it resends. 5 ms was too short for a
// join storm of 5,000 owners (a step each, one raft entry each: not
// converged in 10 minutes, 44 s with 100 ms).
const (
	maxBatch      = 256
	maxBatchDelay = 100 * time.Millisecond
)

type streamKey struct{ ns, owner string }

// ownerStream is one open OwnerService.Lease stream.
type ownerStream struct {
	key    streamKey
	nonce  uint64
	out    chan *fugev1.LeaseResponse
	cancel context.CancelFunc
	packed bool // the owner reads packed leases (its first request said so)
}

func newLeaderState(s *Server, core *Manager) *leaderState {
	return &leaderState{
		s:       s,
		core:    core,
		in:      make(chan func(), 1024),
		done:    make(chan struct{}),
		quit:    make(chan struct{}),
		streams: map[streamKey]*ownerStream{},
	}
}

// do runs fn on the loop and waits; ErrNotLeader once the loop has ended.
func (l *leaderState) do(fn func() error) error {
	errc := make(chan error, 1)
	select {
	case l.in <- func() { errc <- fn() }:
	case <-l.done:
		return ErrNotLeader
	}
	select {
	case err := <-errc:
		return err
	case <-l.done:
		return ErrNotLeader
	}
}

// post queues fn without waiting; false once the loop has ended.
func (l *leaderState) post(fn func()) bool {
	select {
	case l.in <- fn:
		return true
	case <-l.done:
		return false
	}
}

func (l *leaderState) stop() {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	<-l.done
}

func (l *leaderState) run() {
	defer close(l.done)
	defer func() {
		for _, st := range l.streams {
			st.cancel()
		}
	}()
	hb := time.NewTicker(l.s.cfg.HeartbeatInterval)
	defer hb.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// Run the timers once: the restored core recomputes its desired rings.
	if !l.process(l.core.Tick(l.s.cfg.Clock.Now())) {
		return
	}
	for {
		if d := l.core.NextDeadline(); !d.IsZero() {
			timer.Reset(max(d.Sub(l.s.cfg.Clock.Now()), 0))
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-l.quit:
			return
		case fn := <-l.in:
			start := l.s.cfg.Clock.Now()
			fn()
			// Handle the requests already waiting before committing, so
			// that their outputs share one raft entry.
			for range maxBatch - 1 {
				if l.s.cfg.Clock.Now().Sub(start) >= maxBatchDelay {
					break
				}
				select {
				case fn := <-l.in:
					fn()
					continue
				default:
				}
				break
			}
			if !l.flush() {
				return
			}
		case <-timer.C:
			if !l.process(l.core.Tick(l.s.cfg.Clock.Now())) {
				return
			}
		case <-hb.C:
			if l.s.cfg.Heartbeat != nil {
				for _, nc := range l.core.Namespaces() {
					l.s.cfg.Heartbeat(nc.Name)
				}
			}
			l.s.handOffLookups()
		}
		select {
		case <-l.quit:
			return
		default:
		}
	}
}

// queue adds an output to the batch, which the loop commits (flush)
// before any of its messages is sent.
func (l *leaderState) queue(out Output) {
	l.countStats()
	l.batch.merge(out)
}

// flush commits and sends the batch. It returns false, and ends leadership
// here, if the commit failed.
func (l *leaderState) flush() bool {
	if len(l.batch.Commits)+len(l.batch.Send)+len(l.batch.Events) == 0 {
		return true
	}
	out := l.batch
	l.batch = Output{}
	return l.commit(out)
}

// process commits the batch and an output's durable part, then sends their
// messages. It returns false, and ends leadership here, if the commit
// failed.
func (l *leaderState) process(out Output) bool {
	l.queue(out)
	return l.flush()
}

// commit commits an output's durable part, then sends its messages. It
// returns false, and ends leadership here, if the commit failed.
func (l *leaderState) commit(out Output) bool {
	// The event log tells a step as it happened: expiries, then what the
	// commit changed (an owner's session ending, losses, grants), then the
	// recalls that the commit's new owners cause.
	if len(out.Events) > 0 {
		now := l.s.cfg.Clock.Now()
		l.s.events.coreEvents(out.Events, now, true)
		defer l.s.events.coreEvents(out.Events, now, false)
	}
	if len(out.Commits) > 0 {
		if err := l.s.apply(command{Op: "commit", Commits: out.Commits}); err != nil {
			l.s.log.Warn("commit failed; stepping down", "err", err)
			go l.s.stepDown()
			select {
			case <-l.quit:
			default:
				close(l.quit)
			}
			return false
		}
	}
	for i := range out.Send {
		m := &out.Send[i]
		st := l.streams[streamKey{m.Namespace, m.Owner}]
		if st == nil {
			continue // the owner is not connected: the protocol tolerates loss
		}
		select {
		case st.out <- wire.Response(*m, st.packed):
		default:
			l.s.metrics.sendDropped.Inc() // a slow owner: drop, it re-sends
		}
	}
	return true
}

func (l *leaderState) countStats() {
	st := l.core.Stats()
	m := l.s.metrics
	m.grants.Add(float64(st.Grants - l.last.Grants))
	m.recalls.Add(float64(st.Recalls - l.last.Recalls))
	m.expiries.Add(float64(st.Expiries - l.last.Expiries))
	m.droppedRacing.Add(float64(st.DroppedRacing - l.last.DroppedRacing))
	l.last = st
}

// open registers an owner stream. A second live stream for an owner name
// under another incarnation is refused: a name is one process at a time.
func (l *leaderState) open(st *ownerStream) error {
	return l.do(func() error {
		if old := l.streams[st.key]; old != nil {
			if old.nonce != st.nonce {
				return ErrOwnerInUse
			}
			old.cancel() // the same incarnation reconnected
		}
		l.streams[st.key] = st
		return nil
	})
}

func (l *leaderState) closed(st *ownerStream) {
	l.post(func() {
		if l.streams[st.key] == st {
			delete(l.streams, st.key)
		}
	})
}

// request feeds one owner request to the core.
func (l *leaderState) request(req lease.LeaseRequest) error {
	var reqErr error
	err := l.do(func() error {
		out, err := l.core.Request(req, l.s.cfg.Clock.Now())
		if err != nil {
			reqErr = err
			return nil
		}
		// Committed, then sent, by the loop's flush, with the outputs of
		// the other requests waiting now.
		l.queue(out)
		return nil
	})
	if err != nil {
		return err
	}
	return reqErr
}
