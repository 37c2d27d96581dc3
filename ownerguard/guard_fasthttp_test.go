package ownerguard_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
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
	if resp := get("/lose", heldKey); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("lost: status %d, want 503", resp.StatusCode)
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
