package ownerguard

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// maxPooledBuffer is the largest response buffer a pooled writer keeps;
// larger ones are left to the garbage collector.
const maxPooledBuffer = 64 << 10

// HTTP returns next guarded (net/http): a request is refused before next
// runs unless its key is held here under a generation at least the one it
// carries, and next's response is buffered and sent only if the key was
// held throughout (see the package documentation, "Middleware").
func (g *Guard) HTTP(next http.Handler) http.Handler { return &guardedHandler{g: g, next: next} }

// guardedHandler is a handler behind a guard. (A method, not a closure: a
// closure would be compiled again in each caller, where WithContext might
// not be inlined; see ServeHTTP.)
type guardedHandler struct {
	g    *Guard
	next http.Handler
}

func (gh *guardedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := gh.g
	h, ok := g.admitHTTP(w, r)
	if !ok {
		return
	}
	gw := g.writers.Get().(*httpWriter)
	gw.start(w, h)
	if !g.cfg.HTTPNoContext {
		// One allocation for the request copy and its context: inlined
		// here, WithContext's own copy stays on the stack.
		gr := &guardedRequest{ctx: handleCtx{Context: r.Context(), h: h}}
		gr.req = *r.WithContext(&gr.ctx)
		r = &gr.req
	}
	gh.next.ServeHTTP(gw, r)
	abort := gw.finish()
	gw.release()
	if abort {
		// The response was streamed and cannot be recalled: break it,
		// so that the client does not take it for a complete answer.
		panic(http.ErrAbortHandler)
	}
}

// guardedRequest is the request a guarded handler sees, with the context
// that carries its handle.
type guardedRequest struct {
	req http.Request
	ctx handleCtx
}

// HandleFromResponseWriter returns the handle a guard admitted the request
// under, from the ResponseWriter the guard handed to the handler (or one
// that wraps it and has an Unwrap method, as http.ResponseController
// expects). It is valid until the handler returns.
func HandleFromResponseWriter(w http.ResponseWriter) (Handle, bool) {
	for {
		switch x := w.(type) {
		case *httpWriter:
			return x.h, true
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return Handle{}, false
		}
	}
}

// admitHTTP runs the checks before the handler, answering the request
// itself if one fails.
func (g *Guard) admitHTTP(w http.ResponseWriter, r *http.Request) (Handle, bool) {
	var key string
	body := g.bodyNoKeyFunc
	if g.cfg.HTTPKey != nil {
		if k, ok := g.cfg.HTTPKey(r); ok {
			key = k
		}
	} else {
		ks := g.keys.Load()
		if ks == nil { // the namespace's header is not known yet: nothing is held
			g.refuseHTTP(w, http.StatusMisdirectedRequest, g.bodyNotHeld, nil)
			return Handle{}, false
		}
		switch vs := r.Header[ks.httpKey]; len(vs) {
		case 0:
		case 1:
			key = vs[0]
		default:
			g.refuseHTTP(w, http.StatusBadRequest, ks.bodyRepeated, nil)
			return Handle{}, false
		}
		body = ks.bodyNoKey
	}
	if key == "" {
		g.refuseHTTP(w, http.StatusBadRequest, body, nil)
		return Handle{}, false
	}
	var reqGen lease.Gen
	if vs := r.Header[GenerationHeader]; len(vs) > 0 {
		var ok bool
		if reqGen, ok = parseGen(vs[0]); !ok || len(vs) > 1 {
			g.refuseHTTP(w, http.StatusBadRequest, g.bodyBadGen, nil)
			return Handle{}, false
		}
	}
	h, v := g.admit(ring.HashString(key), reqGen)
	switch v {
	case notHeld:
		g.refuseHTTP(w, http.StatusMisdirectedRequest, g.bodyNotHeld, nil)
		return Handle{}, false
	case tooNew:
		g.refuseHTTP(w, http.StatusMisdirectedRequest, g.bodyTooNew, g.gen(h.Gen).vals)
		return Handle{}, false
	}
	return h, true
}

// refuseHTTP answers with one of the guard's text bodies.
func (g *Guard) refuseHTTP(w http.ResponseWriter, code int, body []byte, genVals []string) {
	hdr := w.Header()
	hdr["Content-Type"] = g.textPlain
	hdr["X-Content-Type-Options"] = g.nosniff
	if g.ownerVals != nil {
		hdr[OwnerHeader] = g.ownerVals
	}
	if genVals != nil {
		hdr[GenerationHeader] = genVals
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writerState is where an httpWriter's response is.
type writerState uint8

const (
	buffering writerState = iota // nothing sent; status and body held
	streaming                    // status and headers sent; writes go through
	lost                         // the lease was found lost
	hijacked                     // the handler took the connection
)

// httpWriter is the ResponseWriter a guarded handler writes to. It holds
// the status and up to MaxBufferedBody bytes of body until the handler
// returns; headers go to the real ResponseWriter's map as they are set.
// Writers are pooled: as with net/http's own, a handler must not use one
// after it returns.
type httpWriter struct {
	g      *Guard
	w      http.ResponseWriter
	h      Handle
	state  writerState
	abort  bool // the lease was lost after the response was committed
	status int
	buf    []byte
	outer  http.Header // headers set before the guard ran, kept on a 503
}

func (w *httpWriter) start(rw http.ResponseWriter, h Handle) {
	w.w, w.h = rw, h
	if hdr := rw.Header(); len(hdr) > 0 {
		if w.outer == nil {
			w.outer = make(http.Header, len(hdr))
		}
		for k, v := range hdr {
			w.outer[k] = v
		}
	}
}

func (w *httpWriter) release() {
	w.w, w.h, w.state, w.abort, w.status = nil, Handle{}, buffering, false, 0
	if cap(w.buf) > maxPooledBuffer {
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	clear(w.outer)
	w.g.writers.Put(w)
}

// finish runs after the handler: it checks the lease again and sends the
// buffered response or a 503. It reports whether the connection must be
// aborted because a response already under way can no longer be trusted.
func (w *httpWriter) finish() (abort bool) {
	switch w.state {
	case buffering:
		_ = w.commit()
	case streaming:
		return !w.g.held(w.h)
	case lost:
		return w.abort
	}
	return false
}

// commit checks the lease and sends the status, the stamped headers and the
// buffered body; if the lease was lost it sends a 503 instead and returns
// ErrOwnershipLost.
func (w *httpWriter) commit() error {
	if !w.g.held(w.h) {
		w.replace()
		return ErrOwnershipLost
	}
	hdr := w.w.Header()
	hdr[GenerationHeader] = w.g.gen(w.h.Gen).vals
	if w.g.ownerVals != nil {
		hdr[OwnerHeader] = w.g.ownerVals
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.state = streaming
	if _, ok := hdr["Trailer"]; ok {
		// The handler may have set its declared trailers already, and
		// net/http would send them as headers too: hold them back.
		held := holdTrailers(hdr)
		w.w.WriteHeader(w.status)
		for k, v := range held {
			hdr[k] = v
		}
	} else {
		w.w.WriteHeader(w.status)
	}
	if len(w.buf) > 0 {
		if _, err := w.w.Write(w.buf); err != nil {
			return err
		}
	}
	return nil
}

// holdTrailers removes from hdr the trailers it declares, and returns them.
func holdTrailers(hdr http.Header) http.Header {
	held := http.Header{}
	for _, v := range hdr["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if v, ok := hdr[k]; ok {
				held[k] = v
				delete(hdr, k)
			}
		}
	}
	return held
}

// replace throws the handler's response away, headers included (but not
// those set before the guard ran), and answers 503 with Retry-After.
func (w *httpWriter) replace() {
	w.state = lost
	hdr := w.w.Header()
	clear(hdr)
	for k, v := range w.outer {
		hdr[k] = v
	}
	delete(hdr, "Content-Length")
	hdr["Retry-After"] = w.g.retryVals
	hdr[LostHeader] = lostVals
	w.g.refuseHTTP(w.w, http.StatusServiceUnavailable, w.g.bodyLost, nil)
}

// lostVals is LostHeader's value, shared by every response (never modified).
var lostVals = []string{"1"}

// Header returns the real ResponseWriter's header map.
func (w *httpWriter) Header() http.Header { return w.w.Header() }

// WriteHeader records the status. Informational codes (1xx but 101) are
// sent at once, as net/http sends them.
func (w *httpWriter) WriteHeader(code int) {
	switch w.state {
	case buffering:
		if code < 100 || code > 999 {
			panic(fmt.Sprintf("invalid WriteHeader code %v", code))
		}
		if code < 200 && code != http.StatusSwitchingProtocols {
			w.w.WriteHeader(code)
		} else if w.status == 0 {
			w.status = code
		}
	case streaming:
		w.w.WriteHeader(code)
	}
}

// Write buffers p, or, once the body outgrows MaxBufferedBody, commits the
// response and streams it, checking the lease before every write.
func (w *httpWriter) Write(p []byte) (int, error) {
	switch w.state {
	case buffering:
		if w.status == 0 {
			w.status = http.StatusOK // as net/http: a later WriteHeader is superfluous
		}
		if len(w.buf)+len(p) <= w.g.cfg.MaxBufferedBody {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		if err := w.commit(); err != nil {
			return 0, err
		}
		return w.w.Write(p)
	case streaming:
		if !w.g.held(w.h) {
			w.state, w.abort = lost, true
			return 0, ErrOwnershipLost
		}
		return w.w.Write(p)
	case hijacked:
		return 0, http.ErrHijacked
	}
	return 0, ErrOwnershipLost
}

// WriteString is Write for a string, without converting it.
func (w *httpWriter) WriteString(s string) (int, error) {
	if w.state == buffering && len(w.buf)+len(s) <= w.g.cfg.MaxBufferedBody {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		w.buf = append(w.buf, s...)
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// FlushError commits the response (checking the lease) and flushes it.
// http.ResponseController's Flush calls it.
func (w *httpWriter) FlushError() error {
	switch w.state {
	case buffering:
		if err := w.commit(); err != nil {
			return err
		}
	case lost:
		return ErrOwnershipLost
	case hijacked:
		return http.ErrHijacked
	}
	return http.NewResponseController(w.w).Flush()
}

// Flush is FlushError for http.Flusher.
func (w *httpWriter) Flush() { _ = w.FlushError() }

// Hijack checks the lease, commits what the handler wrote, and hands the
// connection over. The guard does not watch a hijacked connection.
func (w *httpWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	switch w.state {
	case lost:
		return nil, nil, ErrOwnershipLost
	case hijacked:
		return nil, nil, http.ErrHijacked
	case buffering:
		if w.status != 0 {
			if err := w.commit(); err != nil {
				return nil, nil, err
			}
		} else if !w.g.held(w.h) {
			return nil, nil, ErrOwnershipLost
		}
	case streaming:
		if !w.g.held(w.h) {
			w.state, w.abort = lost, true
			return nil, nil, ErrOwnershipLost
		}
	}
	c, rw, err := http.NewResponseController(w.w).Hijack()
	if err == nil {
		w.state = hijacked
	}
	return c, rw, err
}

// Unwrap gives http.ResponseController the underlying writer, for the
// deadlines and full duplex.
func (w *httpWriter) Unwrap() http.ResponseWriter { return w.w }

var (
	_ http.Flusher    = (*httpWriter)(nil)
	_ http.Hijacker   = (*httpWriter)(nil)
	_ io.StringWriter = (*httpWriter)(nil)
)
