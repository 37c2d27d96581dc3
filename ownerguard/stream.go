package ownerguard

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/fuge-project/fuge/api/fugev1"
)

// event is what a stream reports to the session goroutine: a response, or
// the stream's end (resp nil) with its error and the leader trailer.
type event struct {
	s      *stream
	resp   *fugev1.LeaseResponse
	err    error
	leader string
}

// stream is one attempt at OwnerService.Lease on one manager. Its reader
// goroutine feeds the session's event channel; its writer goroutine writes
// the latest request handed to send. Only the latest matters: every request
// carries the whole held set, so a request superseded before it was written
// is simply one the manager never heard, which the protocol tolerates.
type stream struct {
	addr   string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when both goroutines have ended

	mu      sync.Mutex
	next    *fugev1.LeaseRequest // latest request not yet written
	closing bool                 // half-close after writing next
	wake    chan struct{}

	// packed: the manager at the other end said it reads packed leases
	// (set by run before it reports the response that said so), so
	// requests may carry them.
	packed atomic.Bool
}

func newStream(parent context.Context, addr string) *stream {
	ctx, cancel := context.WithCancel(parent)
	return &stream{addr: addr, ctx: ctx, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// send hands req to the writer, replacing any request not yet written.
func (st *stream) send(req *fugev1.LeaseRequest) {
	st.mu.Lock()
	st.next = req
	st.mu.Unlock()
	st.poke()
}

// closeSend half-closes the stream once the pending request is written.
func (st *stream) closeSend() {
	st.mu.Lock()
	st.closing = true
	st.mu.Unlock()
	st.poke()
}

func (st *stream) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// run opens the stream, then reads it until it fails or is canceled.
func (st *stream) run(conn *grpc.ClientConn, events chan<- event, o *Owner, opts ...grpc.CallOption) {
	defer close(st.done)
	defer st.cancel()
	c, err := fugev1.NewOwnerServiceClient(conn).Lease(st.ctx, opts...)
	if err != nil {
		st.report(events, event{s: st, err: err})
		return
	}
	wrote := make(chan struct{})
	go st.write(c, o, wrote)
	defer func() {
		st.cancel()
		<-wrote
	}()
	for {
		resp, err := c.Recv()
		if err != nil {
			e := event{s: st, err: err}
			if v := c.Trailer().Get(LeaderTrailer); len(v) > 0 {
				e.leader = v[0]
			}
			st.report(events, e)
			return
		}
		o.responses.Add(1)
		if resp.Packed {
			st.packed.Store(true)
		}
		if t := o.waiting.Swap(0); t != 0 {
			o.lastWait.Store(o.nowNano() - t)
		}
		if !st.report(events, event{s: st, resp: resp}) {
			return
		}
	}
}

// report delivers e unless the stream has been abandoned.
func (st *stream) report(events chan<- event, e event) bool {
	select {
	case events <- e:
		return true
	case <-st.ctx.Done():
		return false
	}
}

// write writes the latest request whenever there is one.
func (st *stream) write(c grpc.BidiStreamingClient[fugev1.LeaseRequest, fugev1.LeaseResponse], o *Owner, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-st.wake:
		case <-st.ctx.Done():
			return
		}
		st.mu.Lock()
		req, closing := st.next, st.closing
		st.next = nil
		st.mu.Unlock()
		if req != nil {
			// Before Send: the answer may be read, and Stats taken,
			// before Send returns.
			o.waiting.CompareAndSwap(0, o.nowNano())
			o.requests.Add(1)
			if err := c.Send(req); err != nil {
				return // the reader learns the stream's status from Recv
			}
		}
		if closing {
			c.CloseSend()
			return
		}
	}
}
