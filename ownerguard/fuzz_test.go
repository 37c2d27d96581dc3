package ownerguard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/ring"
)

// fuzzChecker holds every key whose hash is even, under a generation from
// 1 to 7 taken from the hash, so that small Fuge-Generation values reach
// both admitted and tooNew.
type fuzzChecker struct{}

func fuzzHeld(hash uint64) (lease.Gen, bool) { return lease.Gen(hash%7 + 1), hash%2 == 0 }

func (fuzzChecker) GetOwnershipHandle(hash uint64) (Handle, bool) {
	g, ok := fuzzHeld(hash)
	if !ok {
		return Handle{}, false
	}
	return Handle{Key: hash, Range: ring.Full(), Gen: g}, true
}

func (fuzzChecker) CheckContinuousOwnership(h Handle) bool {
	g, ok := fuzzHeld(h.Key)
	return ok && g == h.Gen
}

// FuzzGuardKeyAndGeneration gives the net/http, fasthttp and gRPC front
// ends the same routing header and Fuge-Generation values (each absent,
// once or twice) and checks that all three reach the verdict an oracle
// computes from the documented rules: a missing or empty key and a repeated
// one are refused, a generation must be decimal digits within uint64 and
// given once, and a request is admitted only for a held key under a
// generation at most the one held. parseGen must agree with
// strconv.ParseUint (up to its 20-byte bound) and accept its own output.
func FuzzGuardKeyAndGeneration(f *testing.F) {
	f.Add("user-1", "", uint8(1), "", "", uint8(0), false)                  // held under 2: admitted
	f.Add("user-1", "", uint8(1), "2", "", uint8(1), true)                  // admitted, with a cookie
	f.Add("user-1", "", uint8(1), "3", "", uint8(1), false)                 // too new
	f.Add("user-2", "", uint8(1), "", "", uint8(0), true)                   // not held
	f.Add("user-1", "user-2", uint8(2), "1", "", uint8(1), false)           // repeated key
	f.Add("", "", uint8(1), "1", "", uint8(1), true)                        // empty key
	f.Add("k2", "", uint8(0), "", "", uint8(0), false)                      // no key
	f.Add("k2", "", uint8(1), "18446744073709551615", "", uint8(1), false)  // too new, at the bound
	f.Add("k2", "", uint8(1), "18446744073709551616", "", uint8(1), false)  // overflows
	f.Add("k2", "", uint8(1), "00000000000000000007", "7", uint8(2), false) // repeated generation
	f.Add("k2", "", uint8(1), "000000000000000000007", "", uint8(1), false) // 21 bytes
	f.Add("k2", "", uint8(1), "+1", "", uint8(1), false)                    // a sign
	f.Add("k2", "", uint8(1), " 1", "", uint8(1), true)                     // a space
	g, err := NewGuard(fuzzChecker{}, GuardConfig{Name: "o1"})
	if err != nil {
		f.Fatal(err)
	}
	ks := g.keys.Load()
	httpH := g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	fastH := g.FastHTTP(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	unary := g.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/fuzz.Svc/Call"}

	f.Fuzz(func(t *testing.T, key1, key2 string, nKeys uint8, gen1, gen2 string, nGens uint8, cookie bool) {
		keys := []string{key1, key2}[:nKeys%3]
		gens := []string{gen1, gen2}[:nGens%3]

		// The parse contract.
		n, ok := parseGen(gen1)
		if nb, okb := parseGen([]byte(gen1)); nb != n || okb != ok {
			t.Fatalf("parseGen(%q) = %d %v as a string, %d %v as bytes", gen1, n, ok, nb, okb)
		}
		want, err := strconv.ParseUint(gen1, 10, 64)
		if wantOK := err == nil && len(gen1) <= 20; ok != wantOK || ok && uint64(n) != want {
			t.Fatalf("parseGen(%q) = %d %v; strconv.ParseUint says %d %v", gen1, n, ok, want, err)
		}
		if ok {
			if again, ok2 := parseGen(strconv.FormatUint(uint64(n), 10)); !ok2 || again != n {
				t.Fatalf("parseGen(%q) = %d, which formats to a value parsing as %d %v", gen1, n, again, ok2)
			}
		}

		// The oracle.
		wantV, heldGen := oracleVerdict(keys, gens)
		// fasthttp rewrites control characters in values set by hand: a
		// value it could not have parsed off the wire is not compared.
		fastComparable := wireSafe(keys) && wireSafe(gens)

		// net/http.
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if len(keys) > 0 {
			req.Header[DefaultKeyHeader] = keys
		}
		if len(gens) > 0 {
			req.Header[GenerationHeader] = gens
		}
		rec := httptest.NewRecorder()
		httpH.ServeHTTP(rec, req)
		gotHTTP := g.fuzzClassify(ks, rec.Code, rec.Body.Bytes())
		if gotHTTP == admitted && wantV == admitted && rec.Header().Get(GenerationHeader) != strconv.FormatUint(uint64(heldGen), 10) {
			t.Errorf("net/http: admitted, answered under %q, want %d", rec.Header().Get(GenerationHeader), heldGen)
		}

		// fasthttp, with and without a Cookie header (the guard scans the
		// headers differently).
		var ctx fasthttp.RequestCtx
		for _, k := range keys {
			ctx.Request.Header.Add(DefaultKeyHeader, k)
		}
		for _, v := range gens {
			ctx.Request.Header.Add(GenerationHeader, v)
		}
		if cookie {
			ctx.Request.Header.Set("Cookie", "a=b")
		}
		fastH(&ctx)
		gotFast := g.fuzzClassify(ks, ctx.Response.StatusCode(), ctx.Response.Body())
		if fastComparable && gotFast == admitted && wantV == admitted && string(ctx.Response.Header.Peek(GenerationHeader)) != strconv.FormatUint(uint64(heldGen), 10) {
			t.Errorf("fasthttp: admitted, answered under %q, want %d", ctx.Response.Header.Peek(GenerationHeader), heldGen)
		}
		ctx.ResetUserValues()

		// gRPC.
		md := metadata.MD{}
		if len(keys) > 0 {
			md[strings.ToLower(DefaultKeyHeader)] = keys
		}
		if len(gens) > 0 {
			md[genKey] = gens
		}
		var handled Handle
		_, gerr := unary(metadata.NewIncomingContext(context.Background(), md), nil, info,
			func(ctx context.Context, _ any) (any, error) {
				handled, _ = HandleFromContext(ctx)
				return "ok", nil
			})
		gotGRPC := g.fuzzClassifyErr(ks, gerr)
		if gotGRPC == admitted && wantV == admitted && handled.Gen != heldGen {
			t.Errorf("gRPC: admitted under generation %d, want %d", handled.Gen, heldGen)
		}

		if !fastComparable {
			gotFast = wantV
		}
		if gotHTTP != wantV || gotFast != wantV || gotGRPC != wantV {
			t.Fatalf("keys %q, generations %q: net/http %v, fasthttp %v, gRPC %v; want %v",
				keys, gens, gotHTTP, gotFast, gotGRPC, wantV)
		}
	})
}

// wireSafe reports whether every value could arrive in an HTTP/1.1 header
// and in gRPC metadata alike: printable ASCII, no space at either end.
func wireSafe(vs []string) bool {
	for _, v := range vs {
		if strings.TrimSpace(v) != v {
			return false
		}
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return false
			}
		}
	}
	return true
}

// oracleVerdict is the verdict the rules give, and the generation a held
// key is held under.
func oracleVerdict(keys, gens []string) (verdict, lease.Gen) {
	switch {
	case len(keys) > 1:
		return repeatedKey, 0
	case len(keys) == 0 || keys[0] == "":
		return noKey, 0
	}
	var reqGen uint64
	if len(gens) > 0 {
		n, err := strconv.ParseUint(gens[0], 10, 64)
		if err != nil || len(gens[0]) > 20 || len(gens) > 1 {
			return badGen, 0
		}
		reqGen = n
	}
	held, ok := fuzzHeld(ring.HashString(keys[0]))
	switch {
	case !ok:
		return notHeld, 0
	case reqGen > uint64(held):
		return tooNew, held
	}
	return admitted, held
}

// fuzzClassify names the verdict an HTTP answer shows.
func (g *Guard) fuzzClassify(ks *keySpec, code int, body []byte) verdict {
	switch b := string(body); {
	case code == http.StatusOK && b == "ok":
		return admitted
	case code == http.StatusBadRequest && b == string(ks.bodyNoKey):
		return noKey
	case code == http.StatusBadRequest && b == string(ks.bodyRepeated):
		return repeatedKey
	case code == http.StatusBadRequest && b == string(g.bodyBadGen):
		return badGen
	case code == http.StatusMisdirectedRequest && b == string(g.bodyNotHeld):
		return notHeld
	case code == http.StatusMisdirectedRequest && b == string(g.bodyTooNew):
		return tooNew
	}
	return verdict(255)
}

// fuzzClassifyErr names the verdict a gRPC error shows.
func (g *Guard) fuzzClassifyErr(ks *keySpec, err error) verdict {
	switch err {
	case nil:
		return admitted
	case ks.errNoKey:
		return noKey
	case ks.errRepeated:
		return repeatedKey
	case g.errBadGen:
		return badGen
	case g.errNotHeld:
		return notHeld
	case g.errTooNew:
		return tooNew
	}
	return verdict(255)
}
