package ring

import (
	"errors"
	"fmt"
	"math"
)

// Envoy's defaults for RingHash minimum_ring_size and maximum_ring_size.
const (
	EnvoyDefaultMinRingSize = 1024
	EnvoyDefaultMaxRingSize = 1 << 23
)

// ErrEnvoyConfig is returned by BuildEnvoy for input Envoy would refuse.
var ErrEnvoyConfig = errors.New("ring: invalid Envoy ring configuration")

// EnvoyHost is an Envoy endpoint as the ring hash load balancer sees it.
type EnvoyHost struct {
	// Key is the string Envoy hashes: the endpoint's
	// filter_metadata["envoy.lb"]["hash_key"] if set, else its address as
	// Envoy prints it ("127.0.0.1:90"), or its hostname when
	// use_hostname_for_hashing is on.
	Key string
	// Weight is the endpoint's load_balancing_weight (Envoy requires >= 1).
	Weight uint32
}

// EnvoyCounts returns how many ring entries Envoy's RingHashLoadBalancer gives
// each host, in host order, for a single locality (or no locality weighting)
// with the given minimum_ring_size and maximum_ring_size. It repeats Envoy's
// floating-point computation step by step:
//
//	normalized_i = double(w_i) * 1.0 / double(Σ w)
//	min_normalized = min(1.0, min_i normalized_i)
//	scale = min(ceil(min_normalized * min_ring_size) / min_normalized, max_ring_size)
//	target += scale * normalized_i        // running sums over hosts
//	while current < target { entry; current++ }
//
// The counts depend on host order and are not in general proportional to the
// weights. They are exact in one case that Fuge relies on: when the weights
// sum to 2^k and minRingSize = maxRingSize = 2^k, every step above is exact
// in binary floating point (divisions and multiplications by a power of two,
// sums of integers below 2^53), so the counts equal the weights, in any host
// order.
//
// Degenerate input behaves as in Envoy: a zero weight makes the scale NaN and
// every count 0, as does a weight sum above 2^32-1 (Envoy then builds no
// ring). EnvoyCounts returns nil for ring sizes Envoy's configuration refuses
// (minRingSize > maxRingSize, or maxRingSize > 2^23).
//
// Envoy is built for x86-64 without FMA, so scale*normalized_i is rounded
// before it is added; the explicit float64 conversion below stops the Go
// compiler from fusing the two into one multiply-add (which it may do on
// arm64, ppc64 and s390x).
func EnvoyCounts(weights []uint32, minRingSize, maxRingSize uint64) []int {
	if minRingSize > maxRingSize || maxRingSize > EnvoyDefaultMaxRingSize {
		return nil
	}
	counts := make([]int, len(weights))
	if len(weights) == 0 {
		return counts
	}
	var sum uint64
	for _, w := range weights {
		sum += uint64(w)
		if sum > math.MaxUint32 {
			return counts // IS_ENVOY_BUG path: no normalized weights, empty ring
		}
	}
	norm := make([]float64, len(weights))
	minNorm := 1.0
	for i, w := range weights {
		norm[i] = float64(w) * 1.0 / float64(sum)
		minNorm = cppMin(minNorm, norm[i])
	}
	scale := cppMin(math.Ceil(minNorm*float64(minRingSize))/minNorm, float64(maxRingSize))
	var current, target float64
	for i, x := range norm {
		target += float64(scale * x)
		n := 0
		for current < target {
			n++
			current++
		}
		counts[i] = n
	}
	return counts
}

// cppMin is std::min(a, b): (b < a) ? b : a. It differs from Go's min when
// an argument is NaN.
func cppMin(a, b float64) float64 {
	if b < a {
		return b
	}
	return a
}

// BuildEnvoy builds the ring Envoy's ring_hash load balancer (XX_HASH) builds
// for these hosts, with entry counts from EnvoyCounts. Owner names are the
// hosts' keys. Lookup then chooses the same entry as Envoy's chooseHost for
// every hash. Hosts with equal keys, an empty key, a zero weight, weights
// summing past 2^32-1 or ring sizes Envoy refuses are errors.
func BuildEnvoy(hosts []EnvoyHost, minRingSize, maxRingSize uint64) (*Ring, error) {
	if minRingSize > maxRingSize || maxRingSize > EnvoyDefaultMaxRingSize {
		return nil, fmt.Errorf("%w: minimum_ring_size %d, maximum_ring_size %d",
			ErrEnvoyConfig, minRingSize, maxRingSize)
	}
	weights := make([]uint32, len(hosts))
	var sum uint64
	for i, h := range hosts {
		if h.Weight == 0 {
			return nil, fmt.Errorf("%w: host %q has weight 0", ErrEnvoyConfig, h.Key)
		}
		weights[i] = h.Weight
		sum += uint64(h.Weight)
	}
	if sum > math.MaxUint32 {
		return nil, fmt.Errorf("%w: weights sum to %d", ErrEnvoyConfig, sum)
	}
	counts := EnvoyCounts(weights, minRingSize, maxRingSize)
	owners := make([]Owner, len(hosts))
	for i, h := range hosts {
		owners[i] = Owner{Name: h.Key, VNodes: counts[i]}
	}
	return New(owners)
}
