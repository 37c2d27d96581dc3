package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/internal/fugetest"
)

// clientPoller is the poller of a proxy's client listener.
func clientPoller(t *testing.T, p *Proxy) *poller {
	t.Helper()
	ln := p.ln
	if pl, ok := ln.(*perIPListener); ok {
		ln = pl.Listener
	}
	el, ok := ln.(*evListener)
	if !ok {
		t.Fatalf("the proxy listens through a %T, not an evListener", ln)
	}
	return el.p
}

// evPair is an evConn accepted from a TCP listener and its peer.
func evPair(t *testing.T) (*evListener, *evConn, net.Conn) {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := withRawIO(tcp, nil)
	el, ok := ln.(*evListener)
	if !ok {
		t.Fatalf("withRawIO gave a %T", ln)
	}
	t.Cleanup(func() { ln.Close() })
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return el, c.(*evConn), peer
}

// TestNoReadBeforeData: a client that sends its next request only after
// the answer to the last one is read only when a request is there. The
// fasthttp server reads for the next request as soon as it has answered;
// through net (or RawConn) that read finds nothing and costs a system
// call per request, which is what this listener exists to avoid.
func TestNoReadBeforeData(t *testing.T) {
	o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("a") })
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr) })
	pl := clientPoller(t, p)
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(defaultTestTimeout))
	br := bufio.NewReader(c)
	const n = 300
	for i := range n {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: k\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "a" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	// A read that finds nothing can only follow one that took bytes of a
	// later edge with its own; allow a few in n.
	if s := pl.spurious.Load(); s > n/20 {
		t.Fatalf("%d reads of %d requests found nothing, want at most %d", s, n, n/20)
	}
	t.Logf("%d requests, %d client reads that found nothing", n, pl.spurious.Load())
}

// TestPipelinedRequests: requests sent back to back on one connection,
// each in a write of its own and all before any answer, are all answered
// in order: a request that arrives while the connection's goroutine is
// busy with the one before is not left unread.
func TestPipelinedRequests(t *testing.T) {
	// The first request is answered only once every request was written,
	// so the others arrive while the proxy is busy with it.
	written := make(chan struct{})
	o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Request.Header.Peek("N")) == "a" {
			<-written
		}
		ctx.SetBody(ctx.Request.Header.Peek("N"))
	})
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr) })
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(defaultTestTimeout))
	const n = 20
	go func() {
		defer close(written)
		for i := range n {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: k\r\nN: "+string(rune('a'+i))+"\r\n\r\n")
		}
	}()
	br := bufio.NewReader(c)
	for i := range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := string(rune('a' + i)); string(body) != want {
			t.Fatalf("answer %d: %q, want %q", i, body, want)
		}
	}
}

// TestEvConnCloseWakesReader: Close from another goroutine ends a Read
// that waits, with net.ErrClosed, and a Write after it fails the same way.
func TestEvConnCloseWakesReader(t *testing.T) {
	_, c, _ := evPair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 16))
		errc <- err
	}()
	time.AfterFunc(20*time.Millisecond, func() { c.Close() })
	if err := recv(t, "the read's end", errc); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
	if err := c.Close(); err == nil {
		t.Fatal("a second Close returned nil")
	}
}

// TestEvConnWriteWaitsForRoom: a write larger than the socket buffers
// waits for the peer to read and completes; against a peer that does not
// read, the write deadline ends it.
func TestEvConnWriteWaitsForRoom(t *testing.T) {
	_, c, peer := evPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	got := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, io.LimitReader(peer, int64(len(big))))
		got <- int(n)
	}()
	c.SetWriteDeadline(time.Now().Add(defaultTestTimeout))
	if n, err := c.Write(big); err != nil || n != len(big) {
		t.Fatalf("write of %d bytes: %d, %v", len(big), n, err)
	}
	if n := recv(t, "the peer's read", got); n != len(big) {
		t.Fatalf("peer read %d bytes, want %d", n, len(big))
	}

	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.Write(big) // nobody reads now
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == len(big) {
		t.Fatalf("write to a peer that does not read: %d bytes, %v; want a timeout", n, err)
	}
}

// TestEvListenerCloseEndsPoller: closing the listener ends a waiting
// Accept, and once its connections are closed too, the poller's goroutine
// returns and its epoll descriptor is closed.
func TestEvListenerCloseEndsPoller(t *testing.T) {
	el, c, _ := evPair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := el.Accept()
		errc <- err
	}()
	time.AfterFunc(20*time.Millisecond, func() { el.Close() })
	if err := recv(t, "Accept's end", errc); err == nil || !strings.Contains(err.Error(), "use of closed network connection") {
		t.Fatalf("Accept after Close: %v, want the error fasthttp takes for a closed listener", err)
	}
	select {
	case <-el.p.done:
		t.Fatal("the poller stopped while a connection was open")
	default:
	}
	c.Close()
	recv(t, "the poller's end", el.p.done)
}

// TestEvConnChurn: many clients connecting, sending a request and closing,
// at once, through the proxy: every answer is right (a descriptor number
// reused by a new connection never gets an old one's marks or bytes), and
// the poller holds no slot for a closed connection.
func TestEvConnChurn(t *testing.T) {
	o := startOwner(t, "a", func(ctx *fasthttp.RequestCtx) { ctx.SetBody(ctx.Request.Header.Peek("N")) })
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr) })
	pl := clientPoller(t, p)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				tag := string(rune('A'+g)) + string(rune('a'+i))
				c, err := net.Dial("tcp", p.Addr().String())
				if err != nil {
					t.Error(err)
					return
				}
				c.SetDeadline(time.Now().Add(defaultTestTimeout))
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: k\r\nN: "+tag+"\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Error(err)
					c.Close()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				c.Close()
				if string(body) != tag {
					t.Errorf("answer %q, want %q", body, tag)
				}
			}
		}()
	}
	wg.Wait()
	// The server closes its side once it reads the clients' ends.
	open := func() int {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return pl.refs
	}
	fugetest.Eventually(t, "only the listener registered after every client left", func() bool { return open() == 1 })
}
