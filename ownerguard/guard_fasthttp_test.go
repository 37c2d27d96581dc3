package ownerguard_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ownerguard"
)

// TestFastHTTPLostReplacesBodyStream: a body stream has not been read when
// the handler returns, so a lost lease still gets a clean 503.
func TestFastHTTPLostReplacesBodyStream(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	g := newTestGuard(t, fc, nil)
	addr := serveFastHTTP(t, g.FastHTTP(func(ctx *fasthttp.RequestCtx) {
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) { _, _ = w.WriteString("streamed") })
		if string(ctx.Path()) == "/lose" {
			fc.lose(heldKey)
		}
	}))
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/keep", 200, "streamed"},
		{"/lose", 503, "fuge: lease lost during the request\n"},
	} {
		resp := getKey(t, "http://"+addr+tc.path, heldKey)
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != tc.code || string(body) != tc.body {
			t.Errorf("%s: %d %q %v, want %d %q", tc.path, resp.StatusCode, body, err, tc.code, tc.body)
		}
	}
}

// TestFastHTTPLostCancelsHijack: a hijack the handler asked for does not
// happen when the lease was lost; the client gets the 503 and the
// connection stays an HTTP connection.
func TestFastHTTPLostCancelsHijack(t *testing.T) {
	const key2 = "device-8"
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen, key2: 3})
	g := newTestGuard(t, fc, nil)
	addr := serveFastHTTP(t, g.FastHTTP(func(ctx *fasthttp.RequestCtx) {
		ctx.Hijack(func(c net.Conn) { _, _ = io.WriteString(c, "hijacked") })
		if string(ctx.Path()) == "/lose" {
			fc.lose(heldKey)
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func(path, key string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nX-Fuge-Key: "+key+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := get("/lose", heldKey); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(ownerguard.LostHeader) != "1" {
		t.Errorf("lost: status %d %s %q, want 503 and %s: 1", resp.StatusCode, ownerguard.LostHeader, resp.Header.Get(ownerguard.LostHeader), ownerguard.LostHeader)
	}
	// Had the hijack happened, this request would go to the hijack
	// handler and get no HTTP answer.
	if resp := get("/keep", key2); resp.StatusCode != http.StatusOK || resp.Header.Get(ownerguard.GenerationHeader) != "3" {
		t.Errorf("held: status %d, header %v; want 200 and generation 3", resp.StatusCode, resp.Header)
	}
	if rest, err := io.ReadAll(br); string(rest) != "hijacked" {
		t.Errorf("after the held request: %q %v, want the hijack handler's output", rest, err)
	}
}

// TestFastHTTPDoesNotAllocate: the guarded request allocates nothing in
// the steady state, and the handle's box goes back to its pool when fasthttp
// resets the user values.
func TestFastHTTPDoesNotAllocate(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	body := []byte("ok")
	var seen bool
	h := newTestGuard(t, fc, nil).FastHTTP(func(ctx *fasthttp.RequestCtx) {
		_, seen = ownerguard.HandleFromFastHTTP(ctx)
		ctx.SetBody(body)
	})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set(ownerguard.DefaultKeyHeader, heldKey)
	serve := func() {
		h(&ctx)
		ctx.Request.ResetUserValues()
		ctx.Response.Reset()
	}
	serve()
	if _, ok := ownerguard.HandleFromFastHTTP(&ctx); !seen || ok {
		t.Errorf("handler saw a handle: %v (want true); after the reset: %v (want false)", seen, ok)
	}
	// See TestHTTPNoContext on the pool under the race detector.
	if allocs := testing.AllocsPerRun(200, serve); allocs != 0 {
		t.Errorf("guarded request allocates %v times", allocs)
	}
}
func startFastHTTP(t *testing.T, g *ownerguard.Guard, app appHandler) func(guardCall) guardResult {
	addr := serveFastHTTP(t, g.FastHTTP(func(ctx *fasthttp.RequestCtx) {
		h, ok := ownerguard.HandleFromFastHTTP(ctx)
		if h2, ok2 := ownerguard.HandleFromContext(ctx); h2 != h || ok2 != ok {
			t.Errorf("HandleFromContext = %v %v, user value is %v %v", h2, ok2, h, ok)
		}
		body := app(h, ok)
		ctx.Response.Header.Set(appHeader, "1")
		ctx.SetBodyString(body)
	}))
	return httpClient(t, "http://"+addr)
}

// serveFastHTTP serves h on 127.0.0.1 until the test ends.
func serveFastHTTP(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = s.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// parseFastRequest reads raw into ctx as fasthttp's server does, leaving
// the cookies unparsed; disableNormalizing keeps header names as sent.
func parseFastRequest(t testing.TB, ctx *fasthttp.RequestCtx, raw string, disableNormalizing bool) {
	t.Helper()
	ctx.Request.Reset()
	ctx.Response.Reset()
	if disableNormalizing {
		ctx.Request.Header.DisableNormalizing()
	}
	if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("parsing %q: %v", raw, err)
	}
}

// TestFastHTTPHeaderScan: the routing header and Fuge-Generation are found
// the same way whether the request carries cookies (the guard looks the
// names up) or not (it walks the headers once): in any case, as fasthttp
// normalizes names, and only in canonical form when the server keeps names
// as sent.
func TestFastHTTPHeaderScan(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	h := newTestGuard(t, fc, nil).FastHTTP(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	const cookie = "Cookie: session=0123456789abcdef; theme=dark\r\n"
	for _, tc := range []struct {
		name    string
		headers string // header lines, each ending in \r\n
		asSent  bool   // the server disables header name normalizing
		code    int
		body    string // a substring of the body
	}{
		{"held", "X-Fuge-Key: " + heldKey + "\r\nFuge-Generation: 7\r\n", false, 200, "ok"},
		{"held, lower case", "x-fuge-key: " + heldKey + "\r\nfuge-generation: 7\r\n", false, 200, "ok"},
		{"repeated", "X-Fuge-Key: " + heldKey + "\r\nx-fuge-key: " + heldKey + "\r\n", false, 400, "repeated routing"},
		{"generation repeated", "X-Fuge-Key: " + heldKey + "\r\nfuge-generation: 7\r\nFuge-Generation: 7\r\n", false, 400, "malformed"},
		{"generation newer", "X-Fuge-Key: " + heldKey + "\r\nFuge-Generation: 8\r\n", false, 421, "has not heard"},
		{"names as sent", "X-Fuge-Key: " + heldKey + "\r\nFuge-Generation: 7\r\n", true, 200, "ok"},
		{"names as sent, not canonical", "x-fuge-key: " + heldKey + "\r\n", true, 400, "missing routing"},
		{"cookies, names as sent", cookie + "X-Fuge-Key: " + heldKey + "\r\n", true, 200, "ok"},
		{"cookies, names as sent, not canonical", cookie + "x-fuge-key: " + heldKey + "\r\n", true, 400, "missing routing"},
		{"cookies, held", cookie + "X-Fuge-Key: " + heldKey + "\r\nFuge-Generation: 7\r\n", false, 200, "ok"},
		{"cookies, lower case", cookie + "x-fuge-key: " + heldKey + "\r\n", false, 200, "ok"},
		{"cookies, missing", cookie, false, 400, "missing routing"},
		{"cookies, repeated", cookie + "X-Fuge-Key: " + heldKey + "\r\nX-Fuge-Key: " + heldKey + "\r\n", false, 400, "repeated routing"},
		{"cookies, generation repeated", cookie + "X-Fuge-Key: " + heldKey + "\r\nFuge-Generation: 7\r\nFuge-Generation: 7\r\n", false, 400, "malformed"},
		{"cookies, generation newer", cookie + "X-Fuge-Key: " + heldKey + "\r\nFuge-Generation: 8\r\n", false, 421, "has not heard"},
		{"cookies, not held", cookie + "X-Fuge-Key: " + otherKey + "\r\n", false, 421, "not held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			parseFastRequest(t, &ctx, "GET /x HTTP/1.1\r\nHost: x\r\n"+tc.headers+"\r\n", tc.asSent)
			h(&ctx)
			code, body := ctx.Response.StatusCode(), string(ctx.Response.Body())
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("got %d %q, want %d containing %q", code, body, tc.code, tc.body)
			}
			// The generation goes out on an answer and on a refusal
			// for a newer generation.
			wantGen := ""
			if code == 200 || code == 421 && tc.body == "has not heard" {
				wantGen = "7"
			}
			if gen := string(ctx.Response.Header.Peek(ownerguard.GenerationHeader)); gen != wantGen {
				t.Errorf("status %d with generation header %q, want %q", code, gen, wantGen)
			}
		})
	}
}

// TestFastHTTPCookiesDoNotAllocate: a request with cookies, as fasthttp's
// server parses it, is admitted without allocating, and the guard leaves
// its cookies unparsed.
func TestFastHTTPCookiesDoNotAllocate(t *testing.T) {
	fc := newFakeChecker(map[string]lease.Gen{heldKey: heldGen})
	h := newTestGuard(t, fc, nil).FastHTTP(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	var ctx fasthttp.RequestCtx
	parseFastRequest(t, &ctx, "GET /x HTTP/1.1\r\nHost: x\r\nCookie: a=1; b=2\r\nX-Fuge-Key: "+heldKey+"\r\nFuge-Generation: 7\r\n\r\n", false)
	serve := func() {
		h(&ctx)
		ctx.Request.ResetUserValues()
		if ctx.Response.StatusCode() != http.StatusOK {
			t.Fatalf("status %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		ctx.Response.Reset()
	}
	if allocs := testing.AllocsPerRun(200, serve); allocs != 0 {
		t.Errorf("guarded request with cookies allocates %v times", allocs)
	}
	if got := string(ctx.Request.Header.Cookie("b")); got != "2" {
		t.Errorf("cookie b = %q after the guard, want 2", got)
	}
}
