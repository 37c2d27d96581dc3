package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/internal/fugetest"
)

// TestBadRequests: each kind of bad input gets its documented status, never
// reaches an owner, and the proxy goes on serving.
func TestBadRequests(t *testing.T) {
	o := startOwner(t, "a", nil)
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr)
		c.MaxBodyBytes = 1 << 10
	})
	addr := p.Addr().String()
	big := strings.Repeat("x", 64<<10)
	for _, tc := range []struct {
		name, req string
		code      int
		body      string
	}{
		{"no key", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400, msgNoKey + DefaultHeader + "\n"},
		{"empty key", "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key:\r\n\r\n", 400, msgNoKey + DefaultHeader + "\n"},
		{"repeated key", "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\nx-fuge-key: a\r\n\r\n", 400, msgRepeatedKey + DefaultHeader + "\n"},
		{"64 KiB header", "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\nX-Big: " + big + "\r\n\r\n", 431, ""},
		{"body over the limit", "POST / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\nContent-Length: 65536\r\n\r\n" + big, 413, ""},
		{"chunked body over the limit", "POST / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"10000\r\n" + big + "\r\n0\r\n\r\n", 413, ""},
		{"garbage", "NOT HTTP\r\n\r\n", 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := raw(t, addr, tc.req)
			if resp.StatusCode != tc.code || tc.body != "" && body != tc.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tc.code, tc.body)
			}
		})
	}
	if n := o.hits.Load(); n != 0 {
		t.Fatalf("the owner saw %d bad requests", n)
	}
	resp, body := raw(t, addr, "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\n\r\n")
	if resp.StatusCode != 200 || body != "a" {
		t.Fatalf("after the bad requests: %d %q", resp.StatusCode, body)
	}
	s := p.Stats()
	if s.Responses[4] != 7 || s.Responses[2] != 1 || s.Attempts != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestSlowloris: clients that send their headers a byte at a time neither
// stop another client from being served nor keep their connections past
// the read timeout, which counts from the start of the request.
func TestSlowloris(t *testing.T) {
	o := startOwner(t, "a", nil)
	const readTimeout = 300 * time.Millisecond
	p := startProxy(t, func(c *Config) {
		c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr)
		c.ReadTimeout = readTimeout
	})
	addr := p.Addr().String()

	const slow = 50
	type closed struct {
		after time.Duration
		err   error
	}
	results := make(chan closed, slow)
	stop := make(chan struct{})
	defer close(stop)
	for range slow {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		// The writer trickles a request that never ends, one byte per tick.
		go func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			head := "GET / HTTP/1.1\r\nHost: h\r\nX-Fuge-Key: a\r\nX-Pad: "
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				b := byte('x')
				if i < len(head) {
					b = head[i]
				}
				if _, err := conn.Write([]byte{b}); err != nil {
					return
				}
			}
		}()
		// The reader waits for the proxy to close the connection; its own
		// deadline only stops a broken test.
		go func() {
			conn.SetReadDeadline(time.Now().Add(defaultTestTimeout))
			_, err := io.Copy(io.Discard, conn)
			results <- closed{time.Since(start), err}
		}()
	}

	// Meanwhile another client is served, on fresh connections.
	c := newClient(t)
	for i := range 5 {
		resp, body := do(t, c, "GET", fmt.Sprintf("http://%s/%d", addr, i), "", DefaultHeader, "k")
		if resp.StatusCode != 200 || body != "a" {
			t.Fatalf("a normal client got %d %q while slowloris ran", resp.StatusCode, body)
		}
		c.Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	}

	for range slow {
		r := recv(t, "a slow connection to be closed", results)
		var ne net.Error
		if errors.As(r.err, &ne) && ne.Timeout() {
			t.Fatalf("a slow connection was still open after %v", r.after)
		}
		// Loose: the proxy's clock for the timeout starts at accept.
		if r.after < readTimeout/2 {
			t.Fatalf("a slow connection was closed after %v, well before the read timeout", r.after)
		}
	}
}

// TestGracefulShutdown: Shutdown stops accepting connections at once but
// waits for the request in flight, which completes.
func TestGracefulShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	o := startOwner(t, "slow", func(ctx *fasthttp.RequestCtx) {
		close(entered)
		<-release
		ctx.SetBodyString("finished")
	})
	p := startProxy(t, func(c *Config) { c.Balancer = newFakeBalancer(to(o.addr, 1), o.addr) })
	addr := p.Addr().String()
	got := make(chan string, 1)
	go func() {
		resp, body := do(t, newClient(t), "GET", "http://"+addr+"/", "", DefaultHeader, "k")
		got <- fmt.Sprint(resp.StatusCode, " ", body, " close=", resp.Close)
	}()
	recv(t, "the request at the owner", entered)

	stopped := make(chan error, 1)
	go func() { stopped <- p.Shutdown(context.Background()) }()
	fugetest.Eventually(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	case r := <-got:
		t.Fatalf("the request ended (%s) before the owner answered", r)
	default:
	}
	close(release)
	if r := recv(t, "the response", got); r != "200 finished close=true" {
		t.Fatalf("in-flight request: %s", r)
	}
	if err := recv(t, "Shutdown", stopped); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := p.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Shutdown = %v, want ErrClosed", err)
	}
}
