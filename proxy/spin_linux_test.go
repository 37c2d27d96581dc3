package proxy

import (
	"net"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// spinSocket is one end of a loopback TCP connection and its peer, whose
// writes make the end readable.
func spinSocket(t *testing.T) (syscall.RawConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc, peer
}

// spinAwait runs s.await on rc's socket in a goroutine; the channel gets
// its result.
func spinAwait(t *testing.T, s *spinner, rc syscall.RawConn) <-chan bool {
	out := make(chan bool, 1)
	go func() {
		var got bool
		if err := rc.Control(func(fd uintptr) { got = s.await(fd) }); err != nil {
			t.Error(err)
		}
		out <- got
	}()
	return out
}

// The spin returns true once the owner's answer is readable, and counts
// it; with no time limit to speak of, only the answer can end it here.
func TestSpinAnswered(t *testing.T) {
	s := newSpinner(time.Hour)
	s.waiting.Store(1)
	rc, peer := spinSocket(t)
	got := spinAwait(t, s, rc)
	if _, err := peer.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if !recv(t, "the spin's end", got) {
		t.Fatal("await gave up with the answer readable")
	}
	if s.spins.Load() != 1 || s.answered.Load() != 1 {
		t.Fatalf("spins %d answered %d, want 1 and 1", s.spins.Load(), s.answered.Load())
	}
}

// The spin gives up at once, counting nothing, unless the request is the
// only one waiting for an owner, or when spinning is off; and after the
// wait when nothing comes.
func TestSpinOnlyAlone(t *testing.T) {
	rc, _ := spinSocket(t)
	for _, tc := range []struct {
		wait    time.Duration
		waiting int32
		spins   uint64
	}{
		{time.Hour, 2, 0},
		{time.Hour, 0, 0},
		{-1, 1, 0},
		{time.Millisecond, 1, 1}, // spins, and gives up after the millisecond
	} {
		s := newSpinner(tc.wait)
		s.waiting.Store(tc.waiting)
		if recv(t, "the spin's end", spinAwait(t, s, rc)) {
			t.Errorf("wait %v, waiting %d: await reported an answer that was never sent", tc.wait, tc.waiting)
		}
		if s.spins.Load() != tc.spins || s.answered.Load() != 0 {
			t.Errorf("wait %v, waiting %d: spins %d answered %d, want %d and 0", tc.wait, tc.waiting, s.spins.Load(), s.answered.Load(), tc.spins)
		}
	}
}

// The spin gives up as soon as another request waits for an owner, or a
// client socket has something: the runtime's poller does not run while a
// goroutine spins, so a client request would wait for the spin to end.
func TestSpinYields(t *testing.T) {
	t.Run("second waiter", func(t *testing.T) {
		s := newSpinner(time.Hour)
		s.waiting.Store(1)
		rc, _ := spinSocket(t)
		got := spinAwait(t, s, rc)
		waitFor(t, "the spin to start", func() bool { return s.spins.Load() == 1 })
		s.waiting.Add(1)
		if recv(t, "the spin's end after a second waiter came", got) {
			t.Fatal("await reported an answer that was never sent")
		}
	})
	t.Run("client event", func(t *testing.T) {
		s := newSpinner(time.Hour)
		s.waiting.Store(1)
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(epfd)
		s.addPoller(epfd)
		client, clientPeer := spinSocket(t)
		var cerr error
		if err := client.Control(func(fd uintptr) {
			cerr = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(fd), &syscall.EpollEvent{Events: syscall.EPOLLIN | epollET})
		}); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
		rc, _ := spinSocket(t)
		got := spinAwait(t, s, rc)
		waitFor(t, "the spin to start", func() bool { return s.spins.Load() == 1 })
		if _, err := clientPeer.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if recv(t, "the spin's end after a client sent", got) {
			t.Fatal("await reported an answer that was never sent")
		}
		s.removePoller(epfd)
		if fds := s.epfds.Load(); fds == nil || len(*fds) != 0 {
			t.Fatalf("after removePoller: %v", fds)
		}
	})
}

// waitFor polls cond until it holds, or fails after defaultTestTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// Through the proxy: once the owner's first 256 answers (a service-time
// window) showed it answers within SpinWait, each request of a client that
// sends one at a time polls its owner once (it is alone in flight), and
// the answers are right. Nothing spins with SpinWait negative, before the
// window, or for an owner whose fastest answer took longer than SpinWait.
// A client listener's epoll instance is known to the spinner while it
// serves.
func TestProxySpins(t *testing.T) {
	fast := startOwner(t, "fast", nil)
	// The slow owner cannot answer within SpinWait: it waits twice that.
	slow := startOwner(t, "slow", func(ctx *fasthttp.RequestCtx) {
		time.Sleep(2 * MaxSpinWait)
		ctx.SetBodyString("slow")
	})
	for _, tc := range []struct {
		o     *testOwner
		wait  time.Duration
		spins bool
	}{
		{fast, MaxSpinWait, true},
		{fast, -1, false},
		{slow, MaxSpinWait, false},
	} {
		p := startProxy(t, func(c *Config) {
			c.Balancer = newFakeBalancer(to(tc.o.addr, 1), tc.o.addr)
			c.SpinWait = tc.wait
		})
		if fds := p.spin.epfds.Load(); fds == nil || len(*fds) != 1 {
			t.Fatalf("the spinner knows of %v epoll instances, want the client listener's", fds)
		}
		cl := newClient(t)
		get := func(i int) {
			t.Helper()
			key := "k" + strconv.Itoa(i)
			resp, body := do(t, cl, "GET", "http://"+p.Addr().String()+"/", "", DefaultHeader, key)
			if resp.StatusCode != 200 || body != tc.o.name {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
			}
		}
		for i := range serviceWindow {
			get(i)
		}
		if st := p.Stats(); st.Spins != 0 {
			t.Fatalf("%s, SpinWait %v: %d spins before a window of answers", tc.o.name, tc.wait, st.Spins)
		}
		const n = 20
		for i := range n {
			get(serviceWindow + i)
		}
		st := p.Stats()
		want := uint64(0)
		if tc.spins {
			want = n
		}
		if st.Spins != want || st.SpinAnswered > st.Spins {
			t.Fatalf("%s, SpinWait %v: %d spins (%d answered), want %d", tc.o.name, tc.wait, st.Spins, st.SpinAnswered, want)
		}
		t.Logf("%s, SpinWait %v: %d spins, %d answered while spinning", tc.o.name, tc.wait, st.Spins, st.SpinAnswered)
	}
}

// A listener's poller tells the spinner of its epoll instance while open.
func TestSpinnerForgetsClosedPoller(t *testing.T) {
	s := newSpinner(DefaultSpinWait)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := withRawIO(tcp, s)
	el, ok := ln.(*evListener)
	if !ok {
		t.Fatalf("withRawIO gave a %T", ln)
	}
	if fds := s.epfds.Load(); fds == nil || len(*fds) != 1 || (*fds)[0] != int32(el.p.epfd) {
		t.Fatalf("spinner's epoll instances %v, want [%d]", fds, el.p.epfd)
	}
	ln.Close()
	recv(t, "the poller's end", el.p.done)
	if fds := s.epfds.Load(); len(*fds) != 0 {
		t.Fatalf("after close the spinner still polls %v", *fds)
	}
}
