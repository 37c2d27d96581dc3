package proxy

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Spinning for an owner's answer (Config.SpinWait).
//
// A request that is the only one the proxy has in flight, once written to
// its owner, polls the owner's socket for up to SpinWait instead of
// sleeping. On this machine (a virtual one) a proxy that sleeps while the
// owner works wakes up about ten microseconds later than the answer came:
// the idle CPU halts and is woken by an interrupt. An in-memory owner
// answers in tens of microseconds, so a short poll catches most answers
// awake. HAProxy has the same trade under "busy-polling" (off by default;
// it spins whenever it is idle), which took 20 µs off its p50 with one
// client connection here; this one spins only while a lone request waits
// for its owner, and at most SpinWait each time.
//
// What it must not do is take the CPU from anything else: between polls
// it yields (runtime.Gosched), so runnable goroutines go first; it gives
// up as soon as a second request is waiting for an owner, or a client
// socket has something (each poll also asks the proxy's client epoll
// instances, so a request arriving meanwhile is not held up, since the
// runtime's poller does not run while a goroutine spins). Sockets the
// runtime polls (the admin listener, the Lookup's gRPC connection, TLS to
// owners) wait at most SpinWait longer. Under load it does not run: there
// is always more than one request in flight. Nor does it for an owner
// whose fastest answer in its last 256 (connPool's service-time window,
// as for pipelining) took longer than SpinWait, nor before the first 256:
// there a spin would give up every time, CPU spent for nothing.
type spinner struct {
	wait    time.Duration // <= 0: never spin
	waiting atomic.Int32  // exchanges waiting for an owner's answer

	mu    sync.Mutex
	epfds atomic.Pointer[[]int32] // the client pollers' epoll instances

	spins, answered atomic.Uint64 // Stats.Spins, Stats.SpinAnswered
}

// maxSpinFDs bounds the client epoll instances a poll asks (one per
// listener served); a proxy with more spins without asking the others.
const maxSpinFDs = 8

func newSpinner(wait time.Duration) *spinner { return &spinner{wait: wait} }

// addPoller makes the spin end when epfd, a client poller's epoll
// instance, has events.
func (s *spinner) addPoller(epfd int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var fds []int32
	if old := s.epfds.Load(); old != nil {
		fds = slices.Clone(*old)
	}
	fds = append(fds, int32(epfd))
	s.epfds.Store(&fds)
}

// removePoller forgets epfd; it must be called before epfd is closed.
func (s *spinner) removePoller(epfd int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.epfds.Load()
	if old == nil {
		return
	}
	fds := slices.DeleteFunc(slices.Clone(*old), func(fd int32) bool { return fd == int32(epfd) })
	s.epfds.Store(&fds)
}
