package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestParseHead(t *testing.T) {
	for _, tc := range []struct {
		name, in              string
		status                int
		length                int64
		chunked, keep, isLost bool
	}{
		{"plain", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", 200, 2, false, true, false},
		{"bare LF", "HTTP/1.1 404 Not Found\nContent-Length: 0\n\n", 404, 0, false, true, false},
		{"no reason", "HTTP/1.1 204\r\n\r\n", 204, -1, false, true, false},
		{"close", "HTTP/1.1 200 OK\r\nConnection: X-A, close\r\n\r\n", 200, -1, false, false, false},
		{"1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", 200, 1, false, false, false},
		{"1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n", 200, 1, false, true, false},
		{"chunked", "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n", 200, -1, true, true, false},
		{"same length twice", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", 200, 3, false, true, false},
		{"lost", "HTTP/1.1 503 Service Unavailable\r\nfuge-lost: 1\r\nContent-Length: 0\r\n\r\n", 503, 0, false, true, true},
		{"empty lost", "HTTP/1.1 503 Service Unavailable\r\nFuge-Lost:\r\n\r\n", 503, -1, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h respHead
			n, err := parseHead([]byte(tc.in+"body"), &h, LostHeader)
			if err != nil || n != len(tc.in) {
				t.Fatalf("parseHead: %d, %v; want %d", n, err, len(tc.in))
			}
			if h.status != tc.status || h.length != tc.length || h.chunked != tc.chunked || h.keepAlive != tc.keep || h.lost != tc.isLost {
				t.Fatalf("got %+v", h)
			}
			// Every prefix is incomplete, not an error.
			for i := range len(tc.in) {
				if n, err := parseHead([]byte(tc.in[:i]), &h, LostHeader); n != 0 || err != nil {
					t.Fatalf("prefix %q: %d, %v; want 0, nil", tc.in[:i], n, err)
				}
			}
		})
	}
}

func TestParseHeadRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n"},
		{"HTTP/2", "HTTP/2 200 OK\r\n\r\n"},
		{"short status", "HTTP/1.1 20\r\n\r\n"},
		{"letters in status", "HTTP/1.1 2x0 OK\r\n\r\n"},
		{"status under 100", "HTTP/1.1 099 Odd\r\n\r\n"},
		{"no space after status", "HTTP/1.1 200OK\r\n\r\n"},
		{"control in reason", "HTTP/1.1 200 O\x00K\r\n\r\n"},
		{"length and chunked", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"chunked and length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"},
		{"gzip coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"},
		{"chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"chunked in 1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"differing lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"},
		{"length list", "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\n"},
		{"negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n"},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n"},
		{"huge length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n"},
		{"length over the bound", "HTTP/1.1 200 OK\r\nContent-Length: 1073741825\r\n\r\n"},
		{"folded line", "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\n\r\n"},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 3\r\n\r\n"},
		{"no colon", "HTTP/1.1 200 OK\r\nX-A\r\n\r\n"},
		{"empty name", "HTTP/1.1 200 OK\r\n: v\r\n\r\n"},
		{"NUL in value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n"},
		{"bare CR in value", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h respHead
			if n, err := parseHead([]byte(tc.in), &h, LostHeader); !errors.Is(err, errMalformed) {
				t.Fatalf("parseHead(%q) = %d, %v; want errMalformed", tc.in, n, err)
			}
		})
	}
	// A head that never ends is refused once over the bound, not buffered
	// for ever.
	long := "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 100)+"\r\n", maxResponseHeadBytes/100)
	var h respHead
	if n, err := parseHead([]byte(long), &h, LostHeader); !errors.Is(err, errMalformed) {
		t.Fatalf("a %d-byte head without its end: %d, %v; want errMalformed", len(long), n, err)
	}
}

func TestEachFieldDropsHopByHop(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Resp-Hop\r\nX-A: 1\r\nKeep-Alive: timeout=5\r\n" +
		"X-Resp-Hop: h\r\nContent-Length: 0\r\nProxy-Authenticate: Basic\r\nX-B: 2\r\nUpgrade: h2c\r\nX-A: 3\r\nTrailer: X-T\r\n\r\n"
	var h respHead
	if _, err := parseHead([]byte(in), &h, LostHeader); err != nil {
		t.Fatal(err)
	}
	var got []string
	eachField(h.fields, h.conn, func(k, v []byte) { got = append(got, string(k)+": "+string(v)) })
	if want := []string{"X-A: 1", "X-B: 2", "X-A: 3"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("forwarded %q, want %q", got, want)
	}
}

func TestParseChunkSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "a": 10, "FF": 255, "10;ext=1": 16, " 3 ": 3, "7fffffffffffff": 0x7fffffffffffff} {
		if n, err := parseChunkSize([]byte(in)); err != nil || n != want {
			t.Errorf("parseChunkSize(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", ";x", "-1", "0x10", "g", "1000000000000000"} {
		if n, err := parseChunkSize([]byte(in)); !errors.Is(err, errMalformed) {
			t.Errorf("parseChunkSize(%q) = %d, %v; want errMalformed", in, n, err)
		}
	}
}

// scriptConn is an owner's side of a connection that answers with a fixed
// byte string, step bytes per Read, and discards what is written to it.
type scriptConn struct {
	net.Conn // nil: only the methods below are used
	in       []byte
	step     int
}

func (c *scriptConn) Read(b []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), c.step)], c.in)
	c.in = c.in[n:]
	return n, nil
}
func (c *scriptConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// roundTrip sends req on c, which carries nothing else, and reads the
// owner's answer into resp, as a request that took c idle does; keep also
// says that the pool would keep c (no bytes left over).
func roundTrip(c *upConn, req *fasthttp.Request, resp *fasthttp.Response, now time.Time, timeout time.Duration, deadline time.Time) (keep bool, err error) {
	keep, err = c.send(appendRequest(nil, req), false, resp, req.Header.IsHead(), now, timeout, deadline)
	return keep && !c.leftover(), err
}

// answer puts a scripted answer through roundTrip.
func answer(in []byte, step int, method string) (*fasthttp.Response, bool, error) {
	c := newUpConn(&scriptConn{in: in, step: max(step, 1)}, &connPool{all: map[*upConn]struct{}{}})
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI("http://owner/x")
	resp := new(fasthttp.Response)
	keep, err := roundTrip(c, &req, resp, time.Now(), time.Second, time.Now().Add(time.Second))
	return resp, keep, err
}

func TestRoundTripBodies(t *testing.T) {
	for _, tc := range []struct {
		name, method, in string
		status           int
		body             string
		keep             bool
	}{
		{"length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, "hello", true},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n1\r\n!\r\n0\r\nX-Trailer: t\r\n\r\n", 200, "hello!", true},
		{"chunked bare LF", "GET", "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nhi\n0\n\n", 200, "hi", true},
		{"to end of connection", "GET", "HTTP/1.1 200 OK\r\n\r\nuntil close", 200, "until close", false},
		{"interim answers first", "GET", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", 201, "ok", true},
		{"HEAD keeps its length", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n", 200, "", true},
		{"204 has no body", "GET", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", true},
		{"304 has no body", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", 304, "", true},
		{"bytes beyond the answer", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n", 200, "ok", false},
		{"close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false},
	} {
		for _, step := range []int{1, 3, 1 << 20} {
			resp, keep, err := answer([]byte(tc.in), step, tc.method)
			if tc.name == "bytes beyond the answer" && step < 1<<20 {
				keep = tc.keep // not read yet, so not seen: only bytes read with the answer are
			}
			if err != nil || resp.StatusCode() != tc.status || string(resp.Body()) != tc.body || keep != tc.keep {
				t.Errorf("%s, %d bytes a read: %v %d %q keep=%v; want %d %q keep=%v",
					tc.name, step, err, resp.StatusCode(), resp.Body(), keep, tc.status, tc.body, tc.keep)
			}
		}
	}
	if resp, _, _ := answer([]byte("HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n"), 1, "HEAD"); resp.Header.ContentLength() != 42 {
		t.Errorf("HEAD: Content-Length %d, want the owner's 42", resp.Header.ContentLength())
	}
}

func TestRoundTripRefusesHostileAnswers(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"nothing", ""},
		{"cut in the head", "HTTP/1.1 200 OK\r\nContent-Le"},
		{"cut in the body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"},
		{"cut in a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nshort"},
		{"no last chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n"},
		{"chunk longer than its size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n"},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
		{"chunks over the bound", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffff\r\n"},
		{"endless chunk line", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("x", 2*maxChunkLineBytes)},
		{"bad trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nno colon\r\n\r\n"},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\n\r\n"},
		{"endless interim answers", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", maxInterimResponses+1)},
		{"smuggling framing", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"endless head", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", maxResponseHeadBytes/5)},
	} {
		for _, step := range []int{1, 7, 1 << 20} {
			if tc.name == "endless head" && step == 1 {
				continue // the same, a byte at a time: slow and no different
			}
			if resp, keep, err := answer([]byte(tc.in), step, "GET"); err == nil || keep {
				t.Errorf("%s, %d bytes a read: %d %q keep=%v, want an error", tc.name, step, resp.StatusCode(), resp.Body(), keep)
			}
		}
	}
}

// FuzzResponse puts arbitrary bytes from an owner through roundTrip, read
// a few bytes at a time, and checks that it does not panic, that what it
// accepts has a final status and no hop-by-hop header, and that where
// fasthttp's own client parser reads the same bytes without error to the
// same status and length, the bodies agree.
func FuzzResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), uint8(3))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), uint8(1))
	f.Add([]byte("HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nConnection: X-A\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n"), uint8(9))
	f.Add([]byte("HTTP/1.0 200 OK\r\n\r\nto the end"), uint8(4))
	f.Fuzz(func(t *testing.T, raw []byte, step uint8) {
		resp, keep, err := answer(raw, int(step), "GET")
		if err != nil {
			if keep {
				t.Fatal("a failed answer keeps its connection")
			}
			return
		}
		if resp.StatusCode() < 200 {
			t.Fatalf("accepted interim status %d", resp.StatusCode())
		}
		for k := range resp.Header.All() {
			if in(k, hopHeaders[:]) && !equalFold(k, "Connection") {
				t.Fatalf("forwarded hop-by-hop header %q", k)
			}
		}
		var oracle fasthttp.Response
		if oracle.Read(bufio.NewReader(bytes.NewReader(raw))) != nil || oracle.StatusCode() != resp.StatusCode() {
			return
		}
		if oracle.Header.ContentLength() >= 0 && !bytes.Equal(oracle.Body(), resp.Body()) {
			t.Fatalf("body %q, fasthttp reads %q", resp.Body(), oracle.Body())
		}
	})
}
