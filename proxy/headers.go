package proxy

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/valyala/fasthttp"
)

// hopHeaders are the hop-by-hop headers (RFC 9110 §7.6.1, and the
// Keep-Alive and Proxy-* headers of older practice) that a proxy must not
// forward, in either direction. Headers named in Connection are removed too.
var hopHeaders = [...]string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// hopByHop reports whether the canonical header name k is always removed.
func hopByHop(k string) bool {
	for _, h := range hopHeaders {
		if h == k {
			return true
		}
	}
	return false
}

// header is what stripHop needs of fasthttp's request and response headers.
type header interface {
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
	AddBytesKV(key, value []byte)
}

// Headers that fasthttp keeps outside its ordered list (it never reorders
// them): stripRequest leaves them alone.
var requestSpecial = []string{"Host", "Content-Type", "User-Agent", "Content-Length", "Cookie"}

// scratch is per-request buffer space, pooled, so that header edits do not
// allocate.
type scratch struct {
	conn  []byte                 // the Connection header's values, copied
	kv    []byte                 // header names and values, copied, for a rebuild
	spans []span                 // the headers in kv
	xff   []byte                 // the new X-Forwarded-For
	ip    []byte                 // the client's address, when its connection did not format it
	gen   []byte                 // the Fuge-Generation value
	req   fasthttp.RequestHeader // a copy to walk when AllInOrder cannot
	w     []byte                 // the request as sent to the owner
	turn  chan struct{}          // a pipelined request's turn to read (connPool.acquire)
}

// span is one header in scratch.kv: the name is kv[start:mid], the value
// kv[mid:end].
type span struct {
	start, mid, end int
	drop            bool
}

// stripRequest removes the hop-by-hop headers, and those named in
// Connection, keeping the order of the others. It keeps the routing header
// key even when Connection names it: the proxy has routed by its value, and
// the owner's guard checks the same value. (An owner's answer is copied
// without them in the first place: copyHead.)
//
// fasthttp deletes a header by swapping the last one into its place, which
// would reorder repeated headers (X-Forwarded-For, say). So when there is
// anything to remove, they copy the ordered headers (less the special ones
// fasthttp keeps apart), delete them all and add back those they keep, in
// order. Most requests have nothing to remove and cost a few lookups.
func stripRequest(h *fasthttp.RequestHeader, key string, s *scratch) {
	if !hasHop(h) {
		return
	}
	s.begin(h)
	n := 0
	for k, v := range h.AllInOrder() { // as received, with no side effects
		s.record(k, v, requestSpecial, key)
		n++
	}
	if n == 0 {
		// AllInOrder parses the raw block again and yields nothing when
		// it does not end in CRLF CRLF (its last line ends in a bare LF,
		// which the server's parser accepts). Walk a copy's parsed
		// headers instead: All rewrites the cookies it walks.
		h.CopyTo(&s.req)
		for k, v := range s.req.All() {
			s.record(k, v, requestSpecial, key)
		}
	}
	s.rebuild(h, requestSpecial, key)
}

// begin starts a rebuild of h: it copies the Connection values, since
// deleting headers moves their storage.
func (s *scratch) begin(h header) {
	s.conn = s.conn[:0]
	for _, v := range h.PeekAll("Connection") {
		s.conn = append(append(s.conn, v...), ',')
	}
	s.kv, s.spans = s.kv[:0], s.spans[:0]
}

// record copies one header, unless it is special, marking whether it goes:
// keep ("" for none) goes only if it is hop-by-hop, whatever Connection says.
func (s *scratch) record(k, v []byte, special []string, keep string) {
	if in(k, special) {
		return
	}
	sp := span{start: len(s.kv), drop: in(k, hopHeaders[:]) || named(k, s.conn) && !equalFold(k, keep)}
	s.kv = append(s.kv, k...)
	sp.mid = len(s.kv)
	s.kv = append(s.kv, v...)
	sp.end = len(s.kv)
	s.spans = append(s.spans, sp)
}

// rebuild deletes the recorded headers and adds back those kept, in order,
// then deletes whatever hop-by-hop headers the records did not show (flags
// such as Connection: close).
func (s *scratch) rebuild(h header, special []string, keep string) {
	for _, sp := range s.spans {
		h.DelBytes(s.kv[sp.start:sp.mid])
	}
	for _, sp := range s.spans {
		if !sp.drop {
			h.AddBytesKV(s.kv[sp.start:sp.mid], s.kv[sp.mid:sp.end])
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	for b := s.conn; len(b) > 0; {
		var tok []byte
		tok, b = nextToken(b)
		if len(tok) > 0 && !in(tok, special) && !equalFold(tok, keep) {
			h.DelBytes(tok)
		}
	}
}

// hasHop reports whether h holds any hop-by-hop header (a Connection header
// names its others).
func hasHop(h header) bool {
	for _, k := range hopHeaders {
		vs := h.PeekAll(k)
		// fasthttp answers one empty Trailer value when there is none.
		if len(vs) > 1 || len(vs) == 1 && (len(vs[0]) > 0 || k != "Trailer") {
			return true
		}
	}
	return false
}

// in reports whether the header name k is one of names (case-insensitive).
func in(k []byte, names []string) bool {
	for _, n := range names {
		if equalFold(k, n) {
			return true
		}
	}
	return false
}

// equalFold compares an ASCII header name case-insensitively.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// named reports whether the comma-separated list conn names k.
func named(k, conn []byte) bool {
	for b := conn; len(b) > 0; {
		var tok []byte
		tok, b = nextToken(b)
		if equalFold(tok, string(k)) {
			return true
		}
	}
	return false
}

// nextToken splits the first element off a comma-separated list, trimmed.
func nextToken(b []byte) (tok, rest []byte) {
	i := 0
	for i < len(b) && b[i] != ',' {
		i++
	}
	tok, rest = b[:i], b[i:]
	if len(rest) > 0 {
		rest = rest[1:]
	}
	return trimOWS(tok), rest
}

// trimOWS trims spaces and tabs.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// Header names the proxy sets, in fasthttp's canonical form, so that
// setting them skips normalizing the name.
var (
	forwardedForKey = []byte("X-Forwarded-For")
	generationKey   = []byte(GenerationHeader)
)

// setForwardedFor appends the client's address ip (text; clientIP) to
// X-Forwarded-For, joining repeated headers into one; had tells whether
// the request has any.
func setForwardedFor(req *fasthttp.Request, ip []byte, had bool, s *scratch) {
	const xff = "X-Forwarded-For"
	s.xff = s.xff[:0]
	if had {
		for _, v := range req.Header.PeekAll(xff) {
			s.xff = append(append(s.xff, v...), ", "...)
		}
		req.Header.Del(xff)
	}
	s.xff = append(s.xff, ip...)
	req.Header.SetCanonical(forwardedForKey, s.xff)
}

// ipTexter is a client connection that formatted its peer's address once,
// when accepted (evConn, perIPConn).
type ipTexter interface{ ipText() []byte }

// clientIP is the client's address as X-Forwarded-For shows it: the
// connection's, formatted when it was accepted, or formatted now into s
// for connections that are not TCP ("unknown" when there is none).
func clientIP(ctx *fasthttp.RequestCtx, s *scratch) []byte {
	if c, ok := ctx.Conn().(ipTexter); ok {
		if ip := c.ipText(); ip != nil {
			return ip
		}
	}
	s.ip = appendIP(s.ip[:0], ctx.RemoteIP())
	return s.ip
}

// appendIP appends ip's text, IPv4-mapped addresses as IPv4, "unknown" for
// no address.
func appendIP(b []byte, ip net.IP) []byte {
	if a, ok := netip.AddrFromSlice(ip); ok {
		return a.Unmap().AppendTo(b)
	}
	return append(b, "unknown"...)
}

// setGeneration stamps the lease generation on the request.
func setGeneration(req *fasthttp.Request, gen uint64, s *scratch) {
	s.gen = strconv.AppendUint(s.gen[:0], gen, 10)
	req.Header.SetCanonical(generationKey, s.gen)
}
