package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The vectors below are from Envoy's
// test/extensions/load_balancing_policies/ring_hash/ring_hash_lb_test.cc
// (XX_HASH, the default). Envoy hashes "<hash key>_<i>", where the hash key
// is the endpoint's metadata hash_key if set, else its address string
// ("127.0.0.1:90" for tcp://127.0.0.1:90).

// envoyEntry is one row of a ring listing in Envoy's test comments.
type envoyEntry struct {
	key  string
	hash uint64
}

// envoyProbe is a chooseHost call: the request hash and the index of the
// host Envoy's test expects.
type envoyProbe struct {
	hash uint64
	host int
}

type envoyCase struct {
	hosts    []EnvoyHost
	min, max uint64
	counts   []int // Envoy's min/max_hashes_per_host stats, per host here
	ring     []envoyEntry
	probes   []envoyProbe
}

func ports(ws []uint32, ps ...int) []EnvoyHost {
	hs := make([]EnvoyHost, len(ps))
	for i, p := range ps {
		hs[i] = EnvoyHost{Key: fmt.Sprintf("127.0.0.1:%d", p), Weight: 1}
		if ws != nil {
			hs[i].Weight = ws[i]
		}
	}
	return hs
}

func checkEnvoy(t *testing.T, c envoyCase) {
	t.Helper()
	ws := make([]uint32, len(c.hosts))
	for i, h := range c.hosts {
		ws[i] = h.Weight
	}
	if got := EnvoyCounts(ws, c.min, c.max); !slices.Equal(got, c.counts) {
		t.Fatalf("EnvoyCounts = %v, want %v", got, c.counts)
	}
	r, err := BuildEnvoy(c.hosts, c.min, c.max)
	if err != nil {
		t.Fatal(err)
	}
	if c.ring != nil {
		if r.Len() != len(c.ring) {
			t.Fatalf("ring has %d entries, want %d", r.Len(), len(c.ring))
		}
		for p, want := range c.ring {
			if e := r.Entry(p); e.Hash != want.hash || r.OwnerName(p) != want.key {
				t.Errorf("entry %d = %s %d, want %s %d", p, r.OwnerName(p), e.Hash, want.key, want.hash)
			}
		}
	}
	for _, p := range c.probes {
		if got, want := r.LookupOwner(p.hash), c.hosts[p.host].Key; got != want {
			t.Errorf("hash %d -> %s, want %s (host %d)", p.hash, got, want, p.host)
		}
	}
}

func TestEnvoyBasic(t *testing.T) {
	checkEnvoy(t, envoyCase{
		hosts: ports(nil, 90, 91, 92, 93, 94, 95),
		min:   12, max: EnvoyDefaultMaxRingSize,
		counts: []int{2, 2, 2, 2, 2, 2},
		ring: []envoyEntry{
			{"127.0.0.1:94", 833437586790550860},
			{"127.0.0.1:92", 928266305478181108},
			{"127.0.0.1:90", 1033482794131418490},
			{"127.0.0.1:95", 3551244743356806947},
			{"127.0.0.1:93", 3851675632748031481},
			{"127.0.0.1:91", 5583722120771150861},
			{"127.0.0.1:91", 6311230543546372928},
			{"127.0.0.1:93", 7700377290971790572},
			{"127.0.0.1:95", 13144177310400110813},
			{"127.0.0.1:92", 13444792449719432967},
			{"127.0.0.1:94", 15516499411664133160},
			{"127.0.0.1:90", 16117243373044804889},
		},
		probes: []envoyProbe{
			{0, 4},
			{math.MaxUint64, 4},
			{3551244743356806947, 5},
			{3551244743356806948, 3},
			{16117243373044804880, 0},
		},
	})
}

func TestEnvoyBasicWithMetadataHashKey(t *testing.T) {
	hs := ports(nil, 90, 91, 92, 93, 94, 95)
	for i := range hs {
		hs[i].Key = fmt.Sprint(90 + i) // metadata hash_key overrides the address
	}
	checkEnvoy(t, envoyCase{
		hosts: hs,
		min:   12, max: EnvoyDefaultMaxRingSize,
		counts: []int{2, 2, 2, 2, 2, 2},
		ring: []envoyEntry{
			{"95", 1975508444536362413},
			{"95", 2376063919839173711},
			{"93", 2386806903309390596},
			{"94", 6749904478991551885},
			{"93", 6803900775736438537},
			{"92", 7225015537174310577},
			{"90", 8787465352164086522},
			{"92", 11282020843382717940},
			{"91", 13723418369486627818},
			{"90", 13776502110861797421},
			{"91", 14338313586354474791},
			{"94", 15364271037087512980},
		},
		probes: []envoyProbe{
			{0, 5},
			{math.MaxUint64, 5},
			{7225015537174310577, 2},
			{6803900775736438537, 3},
		},
	})
}

func TestEnvoyUnevenHosts(t *testing.T) {
	// minimum_ring_size 3 with two hosts: scale = ceil(0.5*3)/0.5 = 4.
	checkEnvoy(t, envoyCase{
		hosts: ports(nil, 80, 81),
		min:   3, max: EnvoyDefaultMaxRingSize,
		counts: []int{2, 2},
		ring: []envoyEntry{
			{"127.0.0.1:80", 5454692015285649509},
			{"127.0.0.1:81", 7859399908942313493},
			{"127.0.0.1:80", 13838424394637650569},
			{"127.0.0.1:81", 16064866803292627174},
		},
		probes: []envoyProbe{{0, 0}},
	})
	checkEnvoy(t, envoyCase{
		hosts: ports(nil, 81, 82),
		min:   3, max: EnvoyDefaultMaxRingSize,
		counts: []int{2, 2},
		ring: []envoyEntry{
			{"127.0.0.1:81", 7859399908942313493},
			{"127.0.0.1:82", 8241336090459785962},
			{"127.0.0.1:82", 12882406409176325258},
			{"127.0.0.1:81", 16064866803292627174},
		},
		probes: []envoyProbe{{0, 0}},
	})
}

func TestEnvoyHostWeightedTinyRing(t *testing.T) {
	checkEnvoy(t, envoyCase{
		hosts: ports([]uint32{1, 2, 3}, 90, 91, 92),
		min:   6, max: 6,
		counts: []int{1, 2, 3},
		probes: []envoyProbe{
			{928266305478181108, 2},
			{4443673547860492590, 2},
			{5583722120771150861, 1},
			{6311230543546372928, 1},
			{13444792449719432967, 2},
			{16117243373044804889, 0},
		},
	})
}

// TestEnvoyCountsFloatingPoint pins the places where Envoy's floating-point
// counts differ from exact arithmetic, so a change that "fixes" them fails.
// The expected values were also checked against the same steps in Python
// (IEEE doubles, no fused multiply-add).
func TestEnvoyCountsFloatingPoint(t *testing.T) {
	for _, c := range []struct {
		weights  []uint32
		min, max uint64
		want     []int
	}{
		// Envoy's own comment: four equal hosts, scale 6 -> 2, 1, 2, 1.
		{[]uint32{1, 1, 1, 1}, 6, 6, []int{2, 1, 2, 1}},
		// Default sizes, three equal hosts: ceil(1024/3) = 342 each.
		{[]uint32{1, 1, 1}, EnvoyDefaultMinRingSize, EnvoyDefaultMaxRingSize, []int{342, 342, 342}},
		// Scale 6 capped to 5: targets 5/3, 10/3, 5 -> 2, 2, 1.
		{[]uint32{1, 1, 1}, 4, 5, []int{2, 2, 1}},
		// Order matters, and a host can get nothing: scale 2, targets 1.5, 2.
		{[]uint32{3, 1}, 2, 2, []int{2, 0}},
		{[]uint32{1, 3}, 2, 2, []int{1, 1}},
		// Weights summing to the ring size, but not a power of two:
		// 29 * (15.0/29) = 15.000000000000002, so the first host gets 16.
		{[]uint32{15, 14}, 29, 29, []int{16, 13}},
		// minimum_ring_size 0: no entries.
		{[]uint32{1, 2}, 0, 16, []int{0, 0}},
		// A zero weight makes Envoy's scale NaN: nothing at all.
		{[]uint32{1, 0, 1}, 16, 16, []int{0, 0, 0}},
		// Ring sizes Envoy refuses.
		{[]uint32{1}, 8, 4, nil},
		{[]uint32{1}, 8, EnvoyDefaultMaxRingSize + 1, nil},
		{nil, 8, 8, []int{}},
	} {
		got := EnvoyCounts(c.weights, c.min, c.max)
		if !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("EnvoyCounts(%v, %d, %d) = %v, want %v", c.weights, c.min, c.max, got, c.want)
		}
	}
}

// TestEnvoyCountsExactPowerOfTwo checks the property Fuge relies on: with
// weights summing to R = 2^k and minimum = maximum ring size = R, Envoy's
// counts are exactly the weights, in any host order.
func TestEnvoyCountsExactPowerOfTwo(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	for iter := 0; iter < 300; iter++ {
		k := 1 + rng.IntN(23)
		size := 1 << k
		n := 1 + rng.IntN(min(size, 300))
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("owner-%d-%d", iter, i)
		}
		owners, err := Apportion(names, size)
		if err != nil {
			t.Fatal(err)
		}
		// Skew them: move random amounts between random owners.
		for j := 0; j < n; j++ {
			from, to := owners[rng.IntN(n)], owners[rng.IntN(n)]
			if from.Name == to.Name || from.VNodes <= 1 {
				continue
			}
			if owners, err = MoveVNodes(owners, from.Name, to.Name, rng.IntN(from.VNodes)); err != nil {
				t.Fatal(err)
			}
		}
		rng.Shuffle(n, func(i, j int) { owners[i], owners[j] = owners[j], owners[i] })
		ws := make([]uint32, 0, n)
		want := make([]int, 0, n)
		for _, o := range owners {
			if o.VNodes > 0 { // Envoy endpoints have weight >= 1
				ws = append(ws, uint32(o.VNodes))
				want = append(want, o.VNodes)
			}
		}
		if got := EnvoyCounts(ws, uint64(size), uint64(size)); !slices.Equal(got, want) {
			t.Fatalf("R=%d weights %v: counts %v", size, ws, got)
		}
	}
}

func TestEnvoyBuildErrors(t *testing.T) {
	for _, c := range []struct {
		hosts    []EnvoyHost
		min, max uint64
	}{
		{[]EnvoyHost{{"a", 1}}, 8, 4},
		{[]EnvoyHost{{"a", 1}}, 8, 1 << 24},
		{[]EnvoyHost{{"a", 0}}, 8, 8},
		{[]EnvoyHost{{"a", math.MaxUint32}, {"b", 1}}, 8, 8},
		{[]EnvoyHost{{"a", 1}, {"a", 1}}, 8, 8},
		{[]EnvoyHost{{"", 1}}, 8, 8},
	} {
		if r, err := BuildEnvoy(c.hosts, c.min, c.max); err == nil {
			t.Errorf("BuildEnvoy(%v, %d, %d) = ring of %d, want error", c.hosts, c.min, c.max, r.Len())
		}
	}
}
