package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Client connections on Linux: readiness from an epoll instance of the
// proxy's own, so that a client socket is read only once it has something.
//
// A read through net (or syscall.RawConn) starts by clearing the runtime
// poller's record of readiness and so must try the socket before it may
// wait: the poller is edge-triggered, and an edge already consumed would
// not come again. fasthttp's server reads for the next request as soon as
// it has answered, when the client cannot have sent it yet, and that read
// fails with EAGAIN: about 0.44 to 1 system call per request in ~4.9 that
// a proxied request costs, where HAProxy reads only when epoll says so.
//
// Here each accepted socket is registered, edge-triggered, in an epoll
// instance (poller) that is itself registered in the runtime's poller. One
// goroutine (poller.loop) takes its events in batches and marks each
// connection readable (or writable), waking the goroutine that waits for
// it. A read clears the mark before it reads: every byte that arrives
// after that makes a new edge, hence a new mark, so a connection whose
// mark is clear has nothing to read, and its reader waits for the mark
// instead of trying. A read that fills the buffer leaves the mark set,
// since more may remain. The only read that finds nothing is one whose
// bytes a previous read took along with those it was woken for (counted
// as spurious; a client that pipelines can cause it).
//
// The connection is the file descriptor alone: accept4 on the listener's
// socket, raw read(2) and write(2) (rawio_linux.go), deadlines of its own
// moved lazily (lazyDeadline), and a close that waits for the system calls
// in progress, so that a descriptor number is never reused under a read.

// poller is the epoll instance of one listener's connections.
type poller struct {
	epfd int
	file *os.File // epfd, so that the runtime's poller wakes loop
	rc   syscall.RawConn

	mu    sync.Mutex
	conns []*evFD  // by slot; nil: free
	gens  []uint32 // by slot: bumped when freed, so that late events miss
	free  []int32
	refs  int // one per registered descriptor: the last one's removal closes epfd

	spin     *spinner      // told of epfd while it is open; may be nil
	spurious atomic.Uint64 // client reads that found nothing
	done     chan struct{} // closed when loop returns
}

func newPoller(spin *spinner) (*poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	f := os.NewFile(uintptr(fd), "fuge-proxy-epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &poller{epfd: fd, file: f, rc: rc, spin: spin, done: make(chan struct{})}
	spin.addPoller(fd)
	go p.loop()
	return p, nil
}

// loop takes events and marks their connections until epfd is closed. It
// stays in one RawConn.Read, whose callback never reports done: the
// runtime clears epfd's readiness once, when the Read starts, and after
// that every event that reaches epfd wakes the callback again.
func (p *poller) loop() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 256)
	_ = p.rc.Read(func(fd uintptr) bool {
		for {
			n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
			switch {
			case e == syscall.EINTR:
				continue
			case e != 0:
				return true // epfd is gone
			case n == 0:
				return false
			}
			p.dispatch(events[:n])
			if int(n) < len(events) {
				return false
			}
		}
	})
}

func (p *poller) dispatch(events []syscall.EpollEvent) {
	const (
		readable = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR
		writable = syscall.EPOLLOUT | syscall.EPOLLHUP | syscall.EPOLLERR
	)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range events {
		slot := int(ev.Fd)
		if slot < 0 || slot >= len(p.conns) {
			continue
		}
		c := p.conns[slot]
		if c == nil || c.gen != uint32(ev.Pad) {
			continue // closed; its slot may have a new connection
		}
		if ev.Events&readable != 0 {
			c.rready.Store(true)
			wakeUp(c.rwake)
		}
		if ev.Events&writable != 0 {
			c.wready.Store(true)
			if c.wwaiting.Load() {
				wakeUp(c.wwake)
			}
		}
	}
}

// epollET is syscall.EPOLLET, which is a negative constant there.
const epollET = 1 << 31

// wakeUp leaves a token in ch (of capacity 1) unless one is there.
func wakeUp(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// evFD is a descriptor's marks of readiness and the channels that wake its
// reader and its writer.
type evFD struct {
	slot int32
	gen  uint32

	rready, wready atomic.Bool // marks: something to read, room to write
	wwaiting       atomic.Bool // a writer waits for room
	rwake, wwake   chan struct{}
}

func newEvFD() evFD { return evFD{rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1)} }

// add registers fd, giving c a slot.
func (p *poller) add(fd int, c *evFD) error {
	p.mu.Lock()
	var slot int32
	if k := len(p.free); k > 0 {
		slot, p.free = p.free[k-1], p.free[:k-1]
		p.conns[slot] = c
	} else {
		slot = int32(len(p.conns))
		p.conns = append(p.conns, c)
		p.gens = append(p.gens, 0)
	}
	c.slot, c.gen = slot, p.gens[slot]
	p.refs++
	p.mu.Unlock()
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET,
		Fd:     slot,
		Pad:    int32(c.gen),
	}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		p.remove(c)
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// remove frees c's slot; events for it that are still on their way are
// dropped (the slot's generation no longer matches).
func (p *poller) remove(c *evFD) {
	p.mu.Lock()
	if p.conns[c.slot] == c {
		p.conns[c.slot] = nil
		p.free = append(p.free, c.slot)
		p.gens[c.slot]++
	}
	p.mu.Unlock()
	p.release()
}

// release drops a reference; the last one closes epfd, which ends loop.
func (p *poller) release() {
	p.mu.Lock()
	p.refs--
	last := p.refs == 0
	p.mu.Unlock()
	if last {
		p.spin.removePoller(p.epfd)
		p.file.Close()
	}
}

// evListener accepts a TCP listener's connections as evConns. The
// listener's own socket is in the poller too: a listener's RawConn cannot
// wait to read, so accept4 runs in its Control, which keeps net from
// closing the socket meanwhile, and waits for the poller's mark.
type evListener struct {
	evFD
	ln     *net.TCPListener
	rc     syscall.RawConn
	p      *poller
	closed atomic.Bool
	once   sync.Once
}

// newEvListener wraps ln; the caller falls back to ln itself on error.
func newEvListener(ln *net.TCPListener, spin *spinner) (net.Listener, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	p, err := newPoller(spin)
	if err != nil {
		return nil, err
	}
	l := &evListener{evFD: newEvFD(), ln: ln, rc: rc, p: p}
	var aerr error
	if err := rc.Control(func(fd uintptr) { aerr = p.add(int(fd), &l.evFD) }); err != nil {
		p.file.Close()
		return nil, err
	} else if aerr != nil {
		return nil, aerr // add closed the poller
	}
	return l, nil
}

func (l *evListener) Addr() net.Addr { return l.ln.Addr() }

func (l *evListener) Close() error {
	l.closed.Store(true)
	err := l.ln.Close()
	l.once.Do(func() {
		wakeUp(l.rwake)
		l.p.remove(&l.evFD) // the listener's own reference
	})
	return err
}

// Accept returns the next connection. Running out of descriptors or memory
// is waited out, as net/http's server does, instead of ending the server
// (fasthttp stops serving on any error but a timeout).
func (l *evListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		if l.closed.Load() {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: net.ErrClosed}
		}
		if !l.rready.Swap(false) {
			<-l.rwake
			continue
		}
		var (
			nfd  int
			sa   syscall.Sockaddr
			aerr error
		)
		if err := l.rc.Control(func(fd uintptr) {
			nfd, sa, aerr = syscall.Accept4(int(fd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		}); err != nil {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: err}
		}
		switch aerr {
		case nil:
			l.rready.Store(true) // more may wait
		case syscall.EAGAIN:
			continue
		case syscall.EINTR, syscall.ECONNABORTED:
			l.rready.Store(true)
			continue
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
			l.rready.Store(true)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff) // nothing to wait on: descriptors come back when connections close
			continue
		default:
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.ln.Addr(), Err: os.NewSyscallError("accept4", aerr)}
		}
		backoff = 0
		c, err := l.newConn(nfd, sa)
		if err != nil {
			syscall.Close(nfd)
			continue // the client is gone, or the poller could not take it
		}
		return c, nil
	}
}

// newConn sets a new socket up as net's listeners do (no Nagle, TCP
// keep-alive every 15 s) and registers it.
func (l *evListener) newConn(fd int, sa syscall.Sockaddr) (*evConn, error) {
	for _, o := range [...][3]int{
		{syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
		{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
	} {
		if err := syscall.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
			return nil, err
		}
	}
	c := &evConn{evFD: newEvFD(), fd: fd, p: l.p, laddr: l.ln.Addr()}
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		ip := net.IP(append([]byte(nil), a.Addr[:]...))
		c.raddr = &net.TCPAddr{IP: ip, Port: a.Port}
		c.ip = appendIP(nil, ip)
	case *syscall.SockaddrInet6:
		ip := net.IP(append([]byte(nil), a.Addr[:]...))
		c.raddr = &net.TCPAddr{IP: ip, Port: a.Port, Zone: zoneName(a.ZoneId)}
		c.ip = appendIP(nil, ip)
	default:
		return nil, errors.New("proxy: accepted a socket that is not TCP/IP")
	}
	if tl, ok := c.laddr.(*net.TCPAddr); ok && tl.IP.IsUnspecified() {
		c.laddr = nil // the listener's wildcard: getsockname when asked
	}
	// Not marked readable: registering reports what is there already
	// (EPOLL_CTL_ADD polls the socket once, edge-triggered or not).
	if err := l.p.add(fd, &c.evFD); err != nil {
		return nil, err
	}
	return c, nil
}

func zoneName(id uint32) string {
	if id == 0 {
		return ""
	}
	if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
		return ifi.Name
	}
	return ""
}

// evConn is a client connection whose readiness comes from its poller.
type evConn struct {
	evFD
	fd    int
	p     *poller
	raddr net.Addr
	ip    []byte // raddr's address as text, for X-Forwarded-For (clientIP)

	laddrOnce sync.Once
	laddr     net.Addr

	// state is 2 × the system calls in progress, plus 1 once closed: the
	// descriptor is closed when both hold (see use and done).
	state atomic.Int64

	mu     sync.Mutex // the deadlines
	rd, wd evDeadline
}

// evDeadline is one direction's deadline: the runtime timer of it is moved
// lazily (lazyDeadline), and expired is set when the one set fires.
type evDeadline struct {
	d       lazyDeadline
	timer   *time.Timer
	expired atomic.Bool
}

func (c *evConn) ipText() []byte       { return c.ip }
func (c *evConn) RemoteAddr() net.Addr { return c.raddr }

func (c *evConn) LocalAddr() net.Addr {
	c.laddrOnce.Do(func() {
		if c.laddr != nil || !c.use() {
			return
		}
		defer c.done()
		switch a, _ := syscall.Getsockname(c.fd); a := a.(type) {
		case *syscall.SockaddrInet4:
			c.laddr = &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
		case *syscall.SockaddrInet6:
			c.laddr = &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port, Zone: zoneName(a.ZoneId)}
		}
	})
	return c.laddr
}

// use counts a system call on the descriptor about to start; false: the
// connection is closed.
func (c *evConn) use() bool {
	for {
		s := c.state.Load()
		if s&1 != 0 {
			return false
		}
		if c.state.CompareAndSwap(s, s+2) {
			return true
		}
	}
}

// done ends what use began; the last one after Close closes the descriptor.
func (c *evConn) done() {
	if c.state.Add(-2) == 1 {
		syscall.Close(c.fd)
	}
}

// Close wakes the connection's reader and writer, which return
// net.ErrClosed, and closes the descriptor once no system call uses it.
func (c *evConn) Close() error {
	for {
		s := c.state.Load()
		if s&1 != 0 {
			return c.opErr("close", net.ErrClosed)
		}
		if c.state.CompareAndSwap(s, s|1) {
			c.p.remove(&c.evFD)
			c.mu.Lock()
			for _, d := range []*evDeadline{&c.rd, &c.wd} {
				if d.timer != nil {
					d.timer.Stop()
				}
			}
			c.mu.Unlock()
			wakeUp(c.rwake)
			wakeUp(c.wwake)
			if s == 0 {
				syscall.Close(c.fd)
			}
			return nil
		}
	}
}

func (c *evConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if !c.use() {
		return 0, c.opErr("read", net.ErrClosed)
	}
	defer c.done()
	for {
		if c.rready.Swap(false) {
			n, e := rawRead(uintptr(c.fd), b)
			switch {
			case e == syscall.EAGAIN:
				c.p.spurious.Add(1)
			case e != 0:
				c.rready.Store(true) // the error stays
				return 0, c.opErr("read", os.NewSyscallError("read", e))
			case n == 0:
				c.rready.Store(true) // so does the end
				return 0, io.EOF
			default:
				if n == len(b) {
					c.rready.Store(true) // more may wait
				}
				return n, nil
			}
		}
		if err := c.wait(&c.rd, c.rwake); err != nil {
			return 0, c.opErr("read", err)
		}
	}
}

func (c *evConn) Write(b []byte) (int, error) {
	if !c.use() {
		return 0, c.opErr("write", net.ErrClosed)
	}
	defer c.done()
	written := 0
	for written < len(b) {
		c.wready.Store(false)
		n, e := rawWrite(uintptr(c.fd), b[written:])
		switch {
		case e == 0:
			written += n
			continue
		case e != syscall.EAGAIN:
			return written, c.opErr("write", os.NewSyscallError("write", e))
		}
		// Full: wait for the mark of room, set by an edge after the
		// write failed (the mark was cleared before it).
		c.wwaiting.Store(true)
		for !c.wready.Load() {
			if err := c.wait(&c.wd, c.wwake); err != nil {
				c.wwaiting.Store(false)
				return written, c.opErr("write", err)
			}
		}
		c.wwaiting.Store(false)
	}
	return written, nil
}

// wait returns when woken through wake, with net.ErrClosed once the
// connection is closed, and os.ErrDeadlineExceeded when d's deadline passed.
func (c *evConn) wait(d *evDeadline, wake chan struct{}) error {
	if c.state.Load()&1 != 0 {
		return net.ErrClosed
	}
	if d.expired.Load() {
		c.mu.Lock()
		t, again := d.d.fired(time.Now().UnixNano())
		if !again {
			c.mu.Unlock()
			return os.ErrDeadlineExceeded
		}
		d.expired.Store(false)
		if !t.IsZero() {
			c.armLocked(d, t, wake)
		}
		c.mu.Unlock()
	}
	<-wake
	if c.state.Load()&1 != 0 {
		return net.ErrClosed
	}
	return nil
}

func (c *evConn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(&c.rd, c.rwake, t)
}

func (c *evConn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(&c.wd, c.wwake, t)
}

func (c *evConn) SetDeadline(t time.Time) error {
	c.setDeadline(&c.rd, c.rwake, t)
	return c.setDeadline(&c.wd, c.wwake, t)
}

// setDeadline asks for t; the timer moves now only if t is earlier than
// the one set (or none is set), else when that one fires.
func (c *evConn) setDeadline(d *evDeadline, wake chan struct{}, t time.Time) error {
	if c.state.Load()&1 != 0 {
		return c.opErr("set deadline", net.ErrClosed)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.d.ask(unixNano(t)) {
		d.expired.Store(false)
		if t.IsZero() {
			if d.timer != nil {
				d.timer.Stop()
			}
		} else {
			c.armLocked(d, t, wake)
		}
	}
	return nil
}

// armLocked sets d's timer to fire at t.
func (c *evConn) armLocked(d *evDeadline, t time.Time, wake chan struct{}) {
	if d.timer == nil {
		d.timer = time.AfterFunc(time.Until(t), func() { c.fired(d, wake) })
		return
	}
	d.timer.Reset(time.Until(t))
}

// fired runs when d's timer fires: on to the deadline asked for if that is
// later, else the waiting read or write ends.
func (c *evConn) fired(d *evDeadline, wake chan struct{}) {
	c.mu.Lock()
	if c.state.Load()&1 != 0 {
		c.mu.Unlock()
		return
	}
	t, again := d.d.fired(time.Now().UnixNano())
	if again {
		if !t.IsZero() {
			d.timer.Reset(time.Until(t))
		}
		c.mu.Unlock()
		return
	}
	d.expired.Store(true)
	c.mu.Unlock()
	wakeUp(wake)
}

func (c *evConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.raddr, Err: err}
}
