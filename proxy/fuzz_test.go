package proxy

import (
	"bufio"
	"bytes"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzRequestHeaders parses a raw header block as fasthttp's server does
// and puts it through the proxy's header handling: the routing key is read,
// then stripRequest, then the Fuge-Generation stamp. It checks that
//   - no hop-by-hop header survives, nor any header the Connection header
//     names, other than fasthttp's special ones and the routing header the
//     key was read from;
//   - every other header survives, with its value, in the order received;
//   - the routing header keeps the value the key was read from, and
//     Fuge-Generation is the proxy's one value, whatever Connection names;
//   - the result does not depend on the scratch space (a used one or a
//     fresh one give the same headers);
//   - scanRequest, the one pass over the raw block that decides which
//     edits serve makes, sees every header those edits are for.
func FuzzRequestHeaders(f *testing.F) {
	f.Add("X-Fuge-Key: k1\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\n")
	f.Add("X-Fuge-Key: k1\r\nConnection: X-Fuge-Key, Fuge-Generation\r\nFuge-Generation: 9\r\n")
	f.Add("X-Fuge-Key: k1\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-For: 192.0.2.2\r\nTe: trailers\r\n")
	f.Add("Connection: close\r\nKeep-Alive: timeout=5\r\nUpgrade: websocket\r\nProxy-Authorization: Basic eA==\r\n")
	f.Add("Connection: Host, Content-Type, Cookie\r\nContent-Type: text/plain\r\nCookie: a=b\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\n")
	f.Add("Connection: ,,x-a ,\tX-B\t,\r\nConnection: x-c\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3\r\nX-D: 4\r\n")
	f.Add("x-fuge-key: lower\r\nCONNECTION: X-FUGE-KEY\r\nTrailer: X-T\r\n")
	const key = DefaultHeader
	used := &scratch{}
	f.Fuzz(func(t *testing.T, block string) {
		var h fasthttp.RequestHeader
		raw := "GET /p HTTP/1.1\r\nHost: example.test\r\n" + block + "\r\n\r\n"
		if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			return // refused by the parser, before the proxy sees it
		}
		// serve edits only what scanRequest saw in the raw block: it
		// must see every header that the parsed one holds.
		scan := scanRequest(h.RawHeaders())
		for _, c := range []struct {
			name string
			has  bool
			saw  bool
		}{
			{"a hop-by-hop header", hasHop(&h), scan.hop},
			{GenerationHeader, len(h.PeekAll(GenerationHeader)) > 0, scan.generation},
			{"Expect", len(h.PeekAll("Expect")) > 0, scan.expect},
			{"X-Forwarded-For", len(h.PeekAll("X-Forwarded-For")) > 0, scan.forwardedFor},
		} {
			if c.has && !c.saw {
				t.Fatalf("scanRequest missed %s in %q", c.name, h.RawHeaders())
			}
		}
		var keyVal []byte
		if vs := h.PeekAll(key); len(vs) == 1 && len(vs[0]) > 0 {
			keyVal = bytes.Clone(vs[0])
		}
		var twin fasthttp.RequestHeader
		h.CopyTo(&twin)

		// The oracle: what should go and what should stay, from the
		// headers as parsed (All, on a copy: it has side effects).
		var conn []string
		for _, v := range h.PeekAll("Connection") {
			for tok := range strings.SplitSeq(string(v), ",") {
				if tok = strings.Trim(tok, " \t"); tok != "" {
					conn = append(conn, strings.ToLower(tok))
				}
			}
		}
		specials := map[string]string{}
		for _, k := range requestSpecial {
			specials[k] = string(h.Peek(k))
		}
		var orig fasthttp.RequestHeader
		h.CopyTo(&orig)
		var want []string
		for k, v := range orig.All() {
			switch lk := strings.ToLower(string(k)); {
			case in(k, requestSpecial):
			case in(k, hopHeaders[:]):
			case slices.Contains(conn, lk) && !equalFold(k, key):
			default:
				want = append(want, string(k)+": "+string(v))
			}
		}

		stripRequest(&h, key, used)
		var got []string
		for _, kv := range allHeaders(&h) {
			if k, _, _ := strings.Cut(kv, ": "); !in([]byte(k), requestSpecial) {
				got = append(got, kv)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("headers after stripRequest:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, k := range requestSpecial {
			if v := string(h.Peek(k)); v != specials[k] {
				t.Errorf("special header %s: %q became %q", k, specials[k], v)
			}
		}
		for _, k := range hopHeaders {
			if vs := h.PeekAll(k); len(vs) > 1 || len(vs) == 1 && len(vs[0]) > 0 {
				t.Errorf("hop-by-hop header %s survived: %q", k, vs)
			}
		}
		if keyVal != nil {
			if vs := h.PeekAll(key); len(vs) != 1 || !bytes.Equal(vs[0], keyVal) {
				t.Errorf("the routing header was %q when the key was read, %q after", keyVal, vs)
			}
		}

		// The same request through a fresh scratch space.
		stripRequest(&twin, key, &scratch{})
		if a, b := allHeaders(&h), allHeaders(&twin); !slices.Equal(a, b) {
			t.Fatalf("stripRequest depends on its scratch space:\n%s\nversus\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
		}

		// The proxy's own Fuge-Generation, after the client's is dropped.
		var req fasthttp.Request
		h.CopyTo(&req.Header)
		req.Header.Del(GenerationHeader)
		setForwardedFor(&req, appendIP(nil, net.IPv4(192, 0, 2, 9)), scan.forwardedFor, used)
		setGeneration(&req, 42, used)
		if vs := req.Header.PeekAll(GenerationHeader); len(vs) != 1 || string(vs[0]) != strconv.Itoa(42) {
			t.Errorf("Fuge-Generation after the stamp: %q, want [42]", vs)
		}
		if xff := req.Header.PeekAll("X-Forwarded-For"); len(xff) != 1 || !bytes.HasSuffix(xff[0], []byte("192.0.2.9")) {
			t.Errorf("X-Forwarded-For after the proxy's: %q", xff)
		}
	})
}

// allHeaders lists every header of h, special ones included, as All
// yields them, from a copy: All rewrites the Cookie header it walks.
func allHeaders(h *fasthttp.RequestHeader) []string {
	var c fasthttp.RequestHeader
	h.CopyTo(&c)
	var out []string
	for k, v := range c.All() {
		out = append(out, string(k)+": "+string(v))
	}
	return out
}
