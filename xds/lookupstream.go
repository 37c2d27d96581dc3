package xds

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A Lookup's stream is served by serveLookup, not by go-control-plane's
// delta handler, because a manager holds thousands of them and each one
// idles between pushes. go-control-plane's handler keeps two goroutines
// per stream (one blocked in Recv, one in a select) and a map of the
// client's versions per type, replaced by a copy on every push; with
// 2,000 lookups that was 4,000 goroutines' stacks and 2,000 copies of the
// same 64-entry map, which, since Go's GC goal counts stacks, weighed about
// twice their size in RSS. Here a stream is one goroutine, blocked in
// Recv; responses are sent by a pool of a few workers, or by a goroutine
// of the stream's own while the client has not read what it was sent (see
// deliver); and the versions a wildcard subscription
// holds after a response are the cache's own map of its current versions,
// shared read-only by every such stream.
//
// The protocol is the delta protocol as go-control-plane serves it, for
// what a Lookup asks: wildcard subscriptions to ArcBlocks and Heartbeats,
// with initial_resource_versions. A Lookup stream that subscribes by name
// or unsubscribes is refused with INVALID_ARGUMENT.

// lookupStreamIDs numbers Lookup streams below zero, apart from
// go-control-plane's stream IDs.
type lookupStreamIDs struct{ n atomic.Int64 }

func (x *lookupStreamIDs) next() int64 { return -x.n.Add(1) }

// lookupSub is a Lookup stream's wildcard subscription to one type. Its
// fields are read and replaced (returned is never modified) under the
// cache's lock: by a watch's answer, or by a lateAnswer as the stream's
// sender reaches it.
type lookupSub struct {
	returned map[string]string
	// epoch is the cache's epoch whose wildcard versions returned is; 0
	// for the versions the client sent as it subscribed.
	epoch uint64
}

var _ cache.Subscription = (*lookupSub)(nil)

func (s *lookupSub) ReturnedResources() map[string]string     { return s.returned }
func (s *lookupSub) SubscribedResources() map[string]struct{} { return nil }
func (s *lookupSub) IsWildcard() bool                         { return true }

// lookupStream is the state of one Lookup stream.
type lookupStream struct {
	t   *LeaseTable
	key streamKey
	s   discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	// By type (lookupType), read and written by serve: the subscriptions,
	// and the open watches' cancel functions. Arrays, not maps: a manager
	// holds thousands of these.
	subs  [2]*lookupSub
	stops [2]func()

	mu      sync.Mutex
	queue   []*deltaResponse
	sending bool // a sender runs: a pool worker or a goroutine of its own
	unacked int  // responses sent that the client has not acknowledged yet
	done    bool // serve returned: nothing more is sent
	nonce   int64
	err     error // the first send error
	cancel  context.CancelFunc
	senders sync.WaitGroup
	// recheck asks the gate again at the next request (RecheckLookups).
	recheck atomic.Bool
	// pooled says where the stream waits for a pool worker (sendPool).
	pooled uint8
	// The stream's part in the table's wholeGate: slot, it holds a slot
	// (taken the hold-th time; stopHold disarms its timeout); waiting, it
	// waits for one with its sender stopped (sending stays true, so no
	// other sender starts), for the wait-th time (stopWait disarms its
	// bound); bypass, it waited too long and sends its next whole table
	// without a slot.
	slot, waiting, bypass bool
	hold, wait            uint64
	stopHold, stopWait    func() bool
}

// serveLookup serves a Lookup's delta ADS stream.
func (t *LeaseTable) serveLookup(s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	ctx, cancel := context.WithCancel(s.Context())
	defer cancel()
	st := &lookupStream{
		t: t, key: streamKey{delta: true, id: t.lookupIDs.next()}, s: s,
		cancel: cancel,
	}
	cb := callbacks{t}
	if err := cb.open(ctx, st.key); err != nil {
		return err
	}
	defer cb.closed(st.key)
	t.smu.Lock()
	t.lookups[st] = struct{}{}
	t.smu.Unlock()
	defer func() {
		t.smu.Lock()
		delete(t.lookups, st)
		t.smu.Unlock()
	}()
	defer st.finish()
	// A send error other than the stream's end (which ends Recv too)
	// is seen at the next request; until then nothing more is sent, and
	// a Lookup that hears nothing abandons the stream (StreamTimeout).
	var node *core.Node
	for {
		req, err := s.Recv()
		if err != nil {
			if e := st.sendErr(); e != nil {
				return e
			}
			return nil // the client closed the stream, or it broke
		}
		if e := st.sendErr(); e != nil {
			return e
		}
		if st.recheck.CompareAndSwap(true, false) && t.gate != nil {
			if err := t.gate(s.Context()); err != nil {
				t.rechecked.Add(1)
				t.log.Debug("Lookup stream ended at a recheck", "stream", st.key.id, "err", err)
				return err
			}
		}
		if req.GetResponseNonce() != "" {
			st.acked()
		}
		cb.request(st.key, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
		if n := req.GetNode(); n != nil {
			// Only what routing and logs read is kept: the node's
			// metadata is a map the stream would otherwise hold.
			ns, err := namespaceOf(n)
			if err != nil {
				return err
			}
			node = &core.Node{Id: n.GetId(), Cluster: ns}
		}
		req.Node = node
		if err := st.onRequest(req); err != nil {
			return err
		}
	}
}

// onRequest opens a watch for the request's type, replacing the open one.
func (st *lookupStream) onRequest(req *discovery.DeltaDiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	if typeURL != ArcBlockTypeURL && typeURL != HeartbeatTypeURL {
		return status.Errorf(codes.InvalidArgument, "%v: %q on a Lookup stream", ErrUnknownType, typeURL)
	}
	if len(req.GetResourceNamesUnsubscribe()) > 0 {
		return status.Errorf(codes.InvalidArgument, "xds: a Lookup stream subscribes by wildcard only")
	}
	for _, name := range req.GetResourceNamesSubscribe() {
		if name != "*" {
			return status.Errorf(codes.InvalidArgument, "xds: a Lookup stream subscribes by wildcard only, not to %q", name)
		}
	}
	k := lookupType(typeURL)
	if stop := st.stops[k]; stop != nil {
		stop()
		st.stops[k] = nil
	}
	sub := st.subs[k]
	var atLeast uint64
	if sub == nil {
		sub = &lookupSub{returned: maps.Clone(req.GetInitialResourceVersions())}
		if sub.returned == nil {
			sub.returned = map[string]string{}
		}
		st.subs[k] = sub
		if typeURL == ArcBlockTypeURL {
			atLeast = newestBlock(sub.returned)
		}
	}
	st.t.mu.RLock()
	defer st.t.mu.RUnlock()
	c, err := mux{st.t}.routeHeld(req.GetNode(), typeURL, func(c *typeCache) bool {
		if c == nil {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(sub.returned) > 0
	})
	if err != nil {
		return err
	}
	stop, err := c.createLookupWatch(req, sub, st.deliver, atLeast)
	if err != nil {
		return err
	}
	if stop != nil {
		st.stops[k] = stop
	}
	return nil
}

// deliver queues a response and starts a sender if none runs. It is
// called with the cache's lock held, so it only queues.
//
// A stream that owes the client nothing (every response acknowledged, so
// every byte sent has been read and its flow-control window is open) has
// its responses sent by the table's pool of a few workers, since its sends
// cannot block: a heartbeat or a table change goes to 2,000 streams at
// once, and a goroutine each would take 2,000 stacks, grown deep by the
// send, all at the same moment. A stream with a response outstanding may
// block its sender until the client reads, so it gets a goroutine of its
// own, and a slow client holds up nobody else.
//
// A table change goes before heartbeats: the pool takes the streams with
// one queued first (sendPool), and a stream's sender sends its table
// responses before its heartbeats (nextResponse). A node heartbeats every
// stream at once; at ten times PRS's load, 10,000 streams a node, a change
// that fell due just after a heartbeat waited behind it.
//
// A response carrying a whole table (wholeGate.min blocks or more) is
// sent only once the stream holds a slot of the table's wholeGate.
func (st *lookupStream) deliver(r *deltaResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	if r.late != nil && slices.ContainsFunc(st.queue, func(q *deltaResponse) bool {
		return q.late != nil && q.late.sub == r.late.sub && !q.late.taking
	}) {
		// The one queued is computed when sent and carries what r would:
		// a client that sends request after request without reading the
		// responses queues at most one per type.
		return
	}
	st.queue = append(st.queue, r)
	if st.sending {
		if isChange(r) {
			st.t.senders.hurry(st)
		}
		return
	}
	st.sending = true
	st.startSender()
}

// isChange reports whether r carries ArcBlocks, not a heartbeat.
func isChange(r *deltaResponse) bool { return r.req.GetTypeUrl() != HeartbeatTypeURL }

// startSender starts a sender for st, which has its sending flag set: a
// pool worker if its client owes nothing, else a goroutine of its own
// (see deliver). st.mu is held.
func (st *lookupStream) startSender() {
	st.senders.Add(1)
	if st.unacked == 0 {
		st.t.senders.submit(st, slices.ContainsFunc(st.queue, isChange))
	} else {
		go st.drain(false)
	}
}

// nextResponse moves the first table response of st's queue to its head,
// ahead of heartbeats, and returns it. The queue is not empty; st.mu is
// held. Responses of one type keep their order, as the protocol requires;
// a heartbeat sent after a table response that was queued after it tells
// the client no less.
func (st *lookupStream) nextResponse() *deltaResponse {
	if i := slices.IndexFunc(st.queue, isChange); i > 0 {
		r := st.queue[i]
		copy(st.queue[1:i+1], st.queue[:i])
		st.queue[0] = r
	}
	return st.queue[0]
}

// acked records the client's acknowledgement (or NACK) of a response.
func (st *lookupStream) acked() {
	st.mu.Lock()
	st.unacked = max(st.unacked-1, 0)
	release := st.unacked == 0 && st.dropSlot()
	st.mu.Unlock()
	if release {
		st.t.whole.release()
	}
}

// drain sends the queued responses in order, then returns. A pool worker
// (pooled) hands the stream to a goroutine of its own as soon as a send
// could block: when a response is outstanding.
func (st *lookupStream) drain(pooled bool) {
	defer st.senders.Done()
	for {
		st.mu.Lock()
		if len(st.queue) == 0 || st.done || st.err != nil {
			st.sending = false
			st.queue = nil
			st.mu.Unlock()
			return
		}
		if pooled && st.unacked > 0 {
			st.senders.Add(1)
			go st.drain(false)
			st.mu.Unlock()
			return
		}
		r := st.nextResponse()
		if r.late != nil {
			// Only this sender takes from the queue, so r is still its
			// head after the cache is read; the cache's lock is not taken
			// under st.mu (deliver is called under it and takes st.mu).
			r.late.taking = true
			st.mu.Unlock()
			rs := r.late.take(r.req)
			st.mu.Lock()
			st.queue = slices.Replace(st.queue, 0, 1, rs...)
			st.mu.Unlock()
			continue
		}
		if !st.slot && len(r.resp.Resources) >= st.t.whole.min {
			switch {
			case st.bypass:
				st.bypass = false
			case st.t.whole.acquire(st):
				st.takeSlot()
			default:
				st.waitSlot() // release, or the wait's bound, resumes it
				st.mu.Unlock()
				return
			}
		}
		st.queue[0] = nil
		st.queue = st.queue[1:]
		st.nonce++
		st.unacked++
		r.resp.Nonce = strconv.FormatInt(st.nonce, 10)
		st.mu.Unlock()
		st.t.pushes.Add(1)
		if err := st.s.Send(r.resp); err != nil {
			st.mu.Lock()
			st.err = err
			st.mu.Unlock()
			st.cancel()
		}
	}
}

// sendPool sends for Lookup streams that owe their client nothing (see
// deliver): up to sendWorkers goroutines, which exist while streams wait.
// Streams with a table change queued (changes) are taken before the
// others (ready). A stream waiting in ready that is given a change moves
// to changes (hurry); its entry in ready stays, and is skipped when
// reached, since a stream's pooled field says where it waits.
type sendPool struct {
	mu             sync.Mutex
	ready, changes []*lookupStream
	workers        int
}

// Where a stream waits for a pool worker: its pooled field, guarded by
// sendPool.mu.
const (
	notPooled = iota
	pooledReady
	pooledChanges
)

// sendWorkers bounds the pool's goroutines.
const sendWorkers = 8

// submit queues st for a worker, among the changes if change is set.
func (p *sendPool) submit(st *lookupStream, change bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if change {
		st.pooled = pooledChanges
		p.changes = append(p.changes, st)
	} else {
		st.pooled = pooledReady
		p.ready = append(p.ready, st)
	}
	if p.workers < sendWorkers {
		p.workers++
		go p.work()
	}
}

// hurry moves st among the changes if it waits among the others.
func (p *sendPool) hurry(st *lookupStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.pooled == pooledReady {
		st.pooled = pooledChanges
		p.changes = append(p.changes, st)
	}
}

func (p *sendPool) work() {
	for {
		p.mu.Lock()
		st := p.next()
		if st == nil {
			p.workers--
			p.ready, p.changes = nil, nil
			p.mu.Unlock()
			return
		}
		st.pooled = notPooled
		p.mu.Unlock()
		st.drain(true)
	}
}

// next takes the next stream waiting, one with a change first; nil if
// none. p.mu is held.
func (p *sendPool) next() *lookupStream {
	if st := popFirst(&p.changes); st != nil {
		return st
	}
	for {
		st := popFirst(&p.ready)
		if st == nil || st.pooled == pooledReady {
			return st
		}
		// moved among the changes and taken from there
	}
}

// popFirst removes the first stream of a queue and returns it, or nil if
// the queue is empty.
func popFirst(q *[]*lookupStream) *lookupStream {
	if len(*q) == 0 {
		return nil
	}
	st := (*q)[0]
	(*q)[0] = nil
	*q = (*q)[1:]
	return st
}

func (st *lookupStream) sendErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// finish cancels the watches and waits for a running sender: gRPC does
// not allow a send once the handler has returned.
func (st *lookupStream) finish() {
	for _, stop := range st.stops {
		if stop != nil {
			stop()
		}
	}
	st.mu.Lock()
	st.done = true
	st.mu.Unlock()
	st.cancel()
	st.senders.Wait()
	st.mu.Lock()
	if st.waiting {
		st.waiting = false
		st.stopWait()
	}
	release := st.dropSlot()
	st.mu.Unlock()
	if release {
		st.t.whole.release()
	}
}

// newestBlock is the highest block version (an LSN) a reconnecting Lookup
// holds, 0 if none. Its first response waits until this node has published
// a view at least as new: every node publishes the same views at the same
// LSNs as raft applies them, but a standby may lag, and a Lookup that moves
// to it from a node ahead of it must not go back in time (it would see
// generations change back, and again forward: loss it did not suffer).
func newestBlock(versions map[string]string) uint64 {
	var newest uint64
	for _, v := range versions {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			newest = max(newest, n)
		}
	}
	return newest
}

// lookupType indexes a Lookup stream's per-type state: 0 for ArcBlocks, 1
// for Heartbeats (the only types onRequest admits).
func lookupType(typeURL string) int {
	if typeURL == HeartbeatTypeURL {
		return 1
	}
	return 0
}
