package proxy

import (
	"bytes"
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/lb"
	"github.com/fuge-project/fuge/ring"
)

// Bodies of the proxy's own answers: short, one line, saying why.
const (
	msgNoKey       = "fuge-proxy: missing routing header "
	msgRepeatedKey = "fuge-proxy: repeated routing header "
	msgGiveUp      = "fuge-proxy: no owner accepted the request within the retry budget\n"
	msgBadGateway  = "fuge-proxy: owner failed after the request was sent\n"
	msgFraming     = "fuge-proxy: request has both Content-Length and Transfer-Encoding\n"
	msgNoHost      = "fuge-proxy: request has no Host\n"
)

// outcome is what one attempt came to.
type outcome int

const (
	answered  outcome = iota // the owner answered, not 421: pass it on
	misrouted                // 421: the owner does not hold the key
	refused                  // not sent: connection refused or failed, no free connection
	failed                   // failed after the request may have been sent
	lost                     // the owner lost the key while handling it (503, LostHeader)
)

// handle proxies one request.
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) {
	c := p.c.shard(ctx.ConnID())
	p.serve(ctx, c)
	c.status(ctx.Response.StatusCode())
}

func (p *Proxy) serve(ctx *fasthttp.RequestCtx, c *counterShard) {
	req := &ctx.Request
	// fasthttp lets Transfer-Encoding override Content-Length and keeps the
	// connection; a front end that framed the body by Content-Length would
	// see the next request differently (smuggling). RFC 9112 §6.3: refuse
	// it and close the connection.
	scan := scanRequest(req.Header.RawHeaders())
	if scan.contentLength && scan.transferEncoding {
		p.fail(ctx, fasthttp.StatusBadRequest, msgFraming)
		ctx.SetConnectionClose()
		return
	}
	// fasthttp requires Host of HTTP/1.1 only; without one the owner's
	// client refuses to send, which is no reason to retry.
	if !hasHost(req) {
		p.fail(ctx, fasthttp.StatusBadRequest, msgNoHost)
		return
	}
	if rl := p.rl.Load(); rl != nil && !rl.admit(ctx) { // fleet-wide rate limits: ratelimit.go
		return
	}
	bal, hash := p.bal, uint64(0)
	switch vs := req.Header.PeekAll(p.cfg.Header); {
	case len(vs) > 1:
		p.reject(ctx, fasthttp.StatusBadRequest, msgRepeatedKey)
		return
	case len(vs) == 1 && len(vs[0]) > 0:
		hash = ring.Hash(vs[0])
	case p.fallback != nil:
		bal = p.fallback
	default:
		p.reject(ctx, fasthttp.StatusBadRequest, msgNoKey)
		return
	}

	s := p.scratch.Get().(*scratch)
	defer p.scratch.Put(s)
	if scan.hop {
		stripRequest(&req.Header, p.cfg.Header, s)
	}
	// The proxy alone stamps Fuge-Generation, and it has read the body.
	if scan.generation {
		req.Header.Del(GenerationHeader)
	}
	if scan.expect {
		req.Header.Del("Expect")
	}
	req.Header.SetNoDefaultContentType(true) // forward the client's, or none
	setForwardedFor(req, clientIP(ctx, s), scan.forwardedFor, s)
	idempotent := isIdempotent(&req.Header)
	deadline := ctx.Time().Add(p.cfg.RetryBudget)
	// No attempt outlives the budget by more than UpstreamTimeout, waiting
	// for a free connection to a busy or black-holed owner included.
	attemptDeadline := deadline.Add(p.cfg.UpstreamTimeout)

	backoff := p.cfg.BackoffBase
	pick, ok := bal.Pick(hash)
	last := refused
	for attempt := 0; ; attempt++ {
		if ok {
			if attempt > 0 {
				c.retries.Add(1)
			}
			// The first attempt starts when fasthttp read the request
			// (ctx.Time, a clock read it makes anyway): the header edits
			// since took a microsecond or two, and time.Now is two vDSO
			// clock reads.
			now := ctx.Time()
			if attempt > 0 {
				now = time.Now()
			}
			switch last = p.attempt(ctx, c, pick, s, idempotent, now, attemptDeadline); {
			case last == answered, last == lost && !idempotent:
				// The owner's hop-by-hop headers were left out (copyHead);
				// the server closes the client's connection if the client
				// asked to.
				return
			case last == failed && !idempotent:
				p.fail(ctx, fasthttp.StatusBadGateway, msgBadGateway)
				return
			}
		}
		// Retry at once if the table already moved the key; otherwise wait
		// for the next change or the backoff, whichever comes first.
		left := time.Until(deadline)
		if left <= 0 {
			p.giveUp(ctx, c, last)
			return
		}
		upd := bal.Updated()
		next, nok := bal.Pick(hash)
		if !nok || !ok || next.Gen == 0 || next.Gen == pick.Gen {
			wait(upd, min(backoff, left))
			if backoff < p.cfg.RetryBudget {
				backoff *= 2
			}
			if time.Until(deadline) <= 0 {
				p.giveUp(ctx, c, last)
				return
			}
			next, nok = bal.Pick(hash)
		}
		pick, ok = next, nok
	}
}

// attempt sends the request to pick's owner once, starting at now. Writing the request and
// reading the answer take UpstreamTimeout at most, and the whole attempt,
// waiting for a free connection included, ends by deadline (a pipelined
// request, waiting for the answers before its own, by UpstreamTimeout
// after the attempt's start or deadline, whichever is later).
func (p *Proxy) attempt(ctx *fasthttp.RequestCtx, c *counterShard, pick lb.Pick, s *scratch, idempotent bool, now, deadline time.Time) outcome {
	c.attempts.Add(1)
	o := p.owners.get(pick.Addr)
	if pick.Gen != 0 {
		setGeneration(&ctx.Request, uint64(pick.Gen), s)
	}
	s.w = appendRequest(s.w[:0], &ctx.Request)
	var pipe []byte
	if idempotent {
		pipe = s.w
		if s.turn == nil {
			s.turn = make(chan struct{}, 1)
		}
	}
	conn, how, err := o.pool.acquire(now, deadline, pipe, s.turn)
	if err != nil {
		c.refused.Add(1)
		return refused
	}
	if how == gotWaited {
		now = time.Now() // dialled it, or waited for it
	}
	start := int64(now.Sub(epoch))
	resp := &ctx.Response
	resp.Reset()
	head := ctx.Request.Header.IsHead()
	var keep bool
	svcStart := start
	if how == gotPipelined {
		c.pipelined.Add(1)
		<-s.turn
		svcStart = int64(time.Since(epoch))
		keep, err = conn.answerTurn(resp, head, now, p.cfg.UpstreamTimeout, deadline)
	} else {
		keep, err = conn.send(s.w, pipe != nil, resp, head, now, p.cfg.UpstreamTimeout, deadline)
	}
	end := conn.readTime.Load()
	if err != nil {
		end = int64(time.Since(epoch))
	}
	conn.lat.observe(time.Duration(end - start))
	isLost := conn.head.lost
	o.pool.done(conn, keep && err == nil, time.Duration(max(end-svcStart, 0)))
	switch {
	case err == nil && resp.StatusCode() == fasthttp.StatusMisdirectedRequest:
		c.misroutes.Add(1)
		return misrouted
	case err == nil && resp.StatusCode() == fasthttp.StatusServiceUnavailable && isLost:
		c.misroutes.Add(1)
		return lost
	case err == nil:
		return answered
	default:
		resp.Reset()
		c.upstreamErrors.Add(1)
		p.log.Debug("upstream error", "owner", pick.Addr, "err", err)
		return failed
	}
}

// giveUp answers a request whose retry budget ran out: 503 when no owner
// took it, 502 when the last attempt failed after sending.
func (p *Proxy) giveUp(ctx *fasthttp.RequestCtx, c *counterShard, last outcome) {
	c.giveUps.Add(1)
	if last == failed {
		p.fail(ctx, fasthttp.StatusBadGateway, msgBadGateway)
		return
	}
	p.fail(ctx, fasthttp.StatusServiceUnavailable, msgGiveUp)
	ctx.Response.Header.Set("Retry-After", "1")
}

// fail replaces whatever an owner answered with the proxy's own response.
func (p *Proxy) fail(ctx *fasthttp.RequestCtx, code int, msg string) {
	ctx.Response.Reset()
	ctx.Response.SetStatusCode(code)
	ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
	ctx.Response.SetBodyString(msg)
}

// reject answers a request that names no usable key.
func (p *Proxy) reject(ctx *fasthttp.RequestCtx, code int, msg string) {
	p.fail(ctx, code, msg)
	ctx.Response.AppendBodyString(p.cfg.Header)
	ctx.Response.AppendBodyString("\n")
}

// handleError answers a request fasthttp could not read: 431 for a header
// over MaxHeaderBytes, 413 for a body over MaxBodyBytes, 408 for a read
// timeout, 400 otherwise. The connection is closed after it.
func (p *Proxy) handleError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		ctx.Error("fuge-proxy: request header too large\n", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ctx.Error("fuge-proxy: request body too large\n", fasthttp.StatusRequestEntityTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("fuge-proxy: request timeout\n", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("fuge-proxy: malformed request\n", fasthttp.StatusBadRequest)
	}
	p.c.shard(ctx.ConnID()).status(ctx.Response.StatusCode())
}

// reqScan is what one pass over a request's raw header block found, so
// that the edits a request needs cost one look at each header line, and
// none when it holds nothing to remove.
type reqScan struct {
	contentLength, transferEncoding bool
	hop                             bool // a hop-by-hop header line (Connection names the others)
	forwardedFor                    bool // an X-Forwarded-For line
	generation, expect              bool // lines the proxy drops
}

// scanRequest looks at each line of a raw request header block (fasthttp
// hides Content-Length once Transfer-Encoding is chunked, and answers
// PeekAll with a key normalized on every call; one pass over the raw
// block does neither).
func scanRequest(raw []byte) reqScan {
	var r reqScan
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			continue
		}
		switch k := line[:i]; {
		case equalFold(k, "Content-Length"):
			r.contentLength = true
		case equalFold(k, "Transfer-Encoding"):
			r.transferEncoding, r.hop = true, true
		case equalFold(k, "X-Forwarded-For"):
			r.forwardedFor = true
		case equalFold(k, GenerationHeader):
			r.generation = true
		case equalFold(k, "Expect"):
			r.expect = true
		case in(k, hopHeaders[:]):
			r.hop = true
		}
	}
	return r
}

// hasHost reports whether req names a host, as len(req.Host()) > 0 does,
// without fasthttp's parse of the whole URI (path unescaping included),
// which cost 1.5% of the proxy's CPU: when the Host header is a plain
// name or address with an optional port and the target is in origin form,
// req.Host() is that header, lower-cased.
func hasHost(req *fasthttp.Request) bool {
	if plainHost(req.Header.Host()) {
		if uri := req.Header.RequestURI(); len(uri) > 0 && uri[0] == '/' && !bytes.Contains(uri, []byte("://")) && !hasCTL(uri) {
			return true
		}
	}
	return len(req.Host()) > 0
}

// plainHost reports whether h is a non-empty host of letters, digits, dots
// and hyphens, with an optional port of up to five digits: a host
// fasthttp's URI parse keeps as it is (lower-cased).
func plainHost(h []byte) bool {
	name := h
	if i := bytes.LastIndexByte(h, ':'); i >= 0 {
		name = h[:i]
		port := h[i+1:]
		if len(port) > 5 {
			return false
		}
		for _, c := range port {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// hasCTL reports whether b holds a control byte, which fails fasthttp's
// URI parse (and so leaves req.Host() empty).
func hasCTL(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// isIdempotent reports whether a request may be sent again after it may
// have been executed (RFC 9110 §9.2.2).
func isIdempotent(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsPut() || h.IsDelete() || h.IsOptions() || h.IsTrace()
}

// wait returns when upd is closed or d has passed.
func wait(upd <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-upd:
	case <-t.C:
	}
}
