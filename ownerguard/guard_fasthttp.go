package ownerguard

import (
	"github.com/valyala/fasthttp"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// fastHeaders are the fasthttp forms of the guard's header keys and values.
type fastHeaders struct {
	gen, owner, retry, lost, one, nosniffKey, nosniff, textPlain, cookie []byte
}

func newFastHeaders() fastHeaders {
	return fastHeaders{
		gen:        []byte(GenerationHeader),
		owner:      []byte(OwnerHeader),
		retry:      []byte("Retry-After"),
		lost:       []byte(LostHeader),
		one:        []byte("1"),
		nosniffKey: []byte("X-Content-Type-Options"),
		nosniff:    []byte("nosniff"),
		textPlain:  []byte("text/plain; charset=utf-8"),
		cookie:     []byte("Cookie"),
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
		if !g.held(h) {
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
	byFunc := g.cfg.FastHTTPKey != nil
	ks := g.keys.Load()
	if ks == nil && !byFunc { // the namespace's header is not known yet: nothing is held
		g.refuseFast(ctx, fasthttp.StatusMisdirectedRequest, g.bodyNotHeld, nil)
		return Handle{}, false
	}
	key, nKeys, gen, nGens := g.scanFast(&ctx.Request.Header, ks, !byFunc)
	body := g.bodyNoKeyFunc
	if byFunc {
		key = nil
		if k, ok := g.cfg.FastHTTPKey(ctx); ok {
			key = k
		}
	} else if nKeys > 1 {
		g.refuseFast(ctx, fasthttp.StatusBadRequest, ks.bodyRepeated, nil)
		return Handle{}, false
	} else {
		body = ks.bodyNoKey
	}
	if len(key) == 0 {
		g.refuseFast(ctx, fasthttp.StatusBadRequest, body, nil)
		return Handle{}, false
	}
	var reqGen lease.Gen
	if nGens > 0 {
		var ok bool
		if reqGen, ok = parseGen(gen); !ok || nGens > 1 {
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

// scanFast finds the routing header (if wantKey) and Fuge-Generation in a
// request: the first value of each and how many times each occurs. Names
// match as fasthttp's PeekAll matches them: exactly, in canonical form
// (fasthttp's server puts names in that form as it parses them, unless told
// not to).
//
// It walks the headers once, which costs a quarter of looking the two
// names up (PeekAll copies and normalizes the name it is given). But
// fasthttp's walk (All) first parses the request's cookies and writes them
// out again, which for a few hundred bytes of cookies costs several times
// the lookups; so a request with a Cookie header has the two names looked
// up instead. Two cases allocate, once per request: a request that
// declares trailers (All formats them), and one whose cookies a handler
// ahead of the guard has already parsed (fasthttp then writes them out
// afresh to answer whether there is a Cookie header).
func (g *Guard) scanFast(h *fasthttp.RequestHeader, ks *keySpec, wantKey bool) (key []byte, nKeys int, gen []byte, nGens int) {
	if len(h.PeekCanonical(g.fast.cookie)) > 0 {
		if wantKey {
			vs := h.PeekAll(ks.httpKey)
			if nKeys = len(vs); nKeys > 0 {
				key = vs[0]
			}
		}
		vs := h.PeekAll(GenerationHeader)
		if nGens = len(vs); nGens > 0 {
			gen = vs[0]
		}
		return key, nKeys, gen, nGens
	}
	for k, v := range h.All() {
		if wantKey && string(k) == ks.httpKey {
			if nKeys++; nKeys == 1 {
				key = v
			}
		}
		if string(k) == GenerationHeader {
			if nGens++; nGens == 1 {
				gen = v
			}
		}
	}
	return key, nKeys, gen, nGens
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
	ctx.Response.Header.SetCanonical(g.fast.lost, g.fast.one)
	g.refuseFast(ctx, fasthttp.StatusServiceUnavailable, g.bodyLost, nil)
}
