package ownerguard

import (
	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// fastHeaders are the fasthttp forms of the guard's header keys and values.
type fastHeaders struct {
	gen, owner, retry, nosniffKey, nosniff, textPlain []byte
}

func newFastHeaders() fastHeaders {
	return fastHeaders{
		gen:        []byte(GenerationHeader),
		owner:      []byte(OwnerHeader),
		retry:      []byte("Retry-After"),
		nosniffKey: []byte("X-Content-Type-Options"),
		nosniff:    []byte("nosniff"),
		textPlain:  []byte("text/plain; charset=utf-8"),
	}
}

// FastHTTP returns next guarded (fasthttp): a request is refused before
// next runs unless its key is held here under a generation at least the one
// it carries; after next, if the key was not held throughout, its response,
// which fasthttp has not yet written, is replaced by a 503 (see the package
// documentation, "Middleware").
func (g *Guard) FastHTTP(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h, ok := g.admitFast(ctx)
		if !ok {
			return
		}
		box := g.boxes.Get().(*handleBox)
		box.h = h
		ctx.SetUserValue(handleKey{}, box)
		next(ctx)
		if !g.c.CheckContinuousOwnership(h) {
			g.replaceFast(ctx)
			return
		}
		ctx.Response.Header.SetCanonical(g.fast.gen, g.gen(h.Gen).bytes)
		if g.ownerBytes != nil {
			ctx.Response.Header.SetCanonical(g.fast.owner, g.ownerBytes)
		}
	}
}

// admitFast runs the checks before the handler, answering the request
// itself if one fails.
func (g *Guard) admitFast(ctx *fasthttp.RequestCtx) (Handle, bool) {
	var key []byte
	if g.cfg.FastHTTPKey != nil {
		if k, ok := g.cfg.FastHTTPKey(ctx); ok {
			key = k
		}
	} else {
		switch vs := ctx.Request.Header.PeekAll(g.cfg.Header); len(vs) {
		case 0:
		case 1:
			key = vs[0]
		default:
			g.refuseFast(ctx, fasthttp.StatusBadRequest, g.bodyRepeated, nil)
			return Handle{}, false
		}
	}
	if len(key) == 0 {
		body := g.bodyNoKey
		if g.cfg.FastHTTPKey != nil {
			body = g.bodyNoKeyFunc
		}
		g.refuseFast(ctx, fasthttp.StatusBadRequest, body, nil)
		return Handle{}, false
	}
	var reqGen lease.Gen
	if vs := ctx.Request.Header.PeekAll(GenerationHeader); len(vs) > 0 {
		var ok bool
		if reqGen, ok = parseGen(vs[0]); !ok || len(vs) > 1 {
			g.refuseFast(ctx, fasthttp.StatusBadRequest, g.bodyBadGen, nil)
			return Handle{}, false
		}
	}
	h, v := g.admit(ring.Hash(key), reqGen)
	switch v {
	case notHeld:
		g.refuseFast(ctx, fasthttp.StatusMisdirectedRequest, g.bodyNotHeld, nil)
		return Handle{}, false
	case tooNew:
		g.refuseFast(ctx, fasthttp.StatusMisdirectedRequest, g.bodyTooNew, g.gen(h.Gen).bytes)
		return Handle{}, false
	}
	return h, true
}

// refuseFast answers with one of the guard's text bodies.
func (g *Guard) refuseFast(ctx *fasthttp.RequestCtx, code int, body, gen []byte) {
	r := &ctx.Response
	r.SetStatusCode(code)
	r.Header.SetContentTypeBytes(g.fast.textPlain)
	r.Header.SetCanonical(g.fast.nosniffKey, g.fast.nosniff)
	if g.ownerBytes != nil {
		r.Header.SetCanonical(g.fast.owner, g.ownerBytes)
	}
	if gen != nil {
		r.Header.SetCanonical(g.fast.gen, gen)
	}
	r.SetBody(body)
}

// replaceFast throws the handler's response away, headers, body stream and
// any hijack it asked for included, and answers 503 with Retry-After.
func (g *Guard) replaceFast(ctx *fasthttp.RequestCtx) {
	ctx.Hijack(nil)
	ctx.Response.Reset()
	ctx.Response.Header.SetCanonical(g.fast.retry, g.retryBytes)
	g.refuseFast(ctx, fasthttp.StatusServiceUnavailable, g.bodyLost, nil)
}
