package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestApportion(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 8))
	for _, size := range []int{1, 2, 64, 4096, 1 << 16, MaxRingSize} {
		for _, n := range []int{1, 2, 3, 7, 10, 50, 333, 5000} {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("owner-%d", i)
			}
			owners, err := Apportion(names, size)
			if err != nil {
				t.Fatal(err)
			}
			if len(owners) != n {
				t.Fatalf("R=%d N=%d: %d owners", size, n, len(owners))
			}
			sum, lo, hi := 0, size, 0
			for i, o := range owners {
				sum += o.VNodes
				lo, hi = min(lo, o.VNodes), max(hi, o.VNodes)
				if i > 0 && owners[i-1].Name >= o.Name {
					t.Fatalf("owners not sorted by name: %q, %q", owners[i-1].Name, o.Name)
				}
			}
			if sum != size {
				t.Fatalf("R=%d N=%d: counts sum to %d", size, n, sum)
			}
			if hi-lo > 1 || lo != size/n {
				t.Fatalf("R=%d N=%d: counts in [%d, %d], want %d or %d", size, n, lo, hi, size/n, size/n+1)
			}
			// Independent of the order of names.
			shuffled := slices.Clone(names)
			rng.Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			again, err := Apportion(shuffled, size)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(owners, again) {
				t.Fatalf("R=%d N=%d: result depends on name order", size, n)
			}
		}
	}
}

// TestApportionStableExtras checks that the owners getting the extra node
// are the ones with the smallest name hashes, not the first names.
func TestApportionStableExtras(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	owners, err := Apportion(names, 8)
	if err != nil {
		t.Fatal(err)
	}
	// The three owners with the smallest name hashes get 2.
	byHash := slices.Clone(names)
	slices.SortFunc(byHash, func(x, y string) int { return cmp.Compare(HashString(x), HashString(y)) })
	for _, o := range owners {
		want := 1
		if slices.Index(byHash, o.Name) < 3 {
			want = 2
		}
		if o.VNodes != want {
			t.Errorf("%s has %d, want %d (hash order %v)", o.Name, o.VNodes, want, byHash)
		}
	}
}

func TestApportionErrors(t *testing.T) {
	for _, size := range []int{0, -4, 3, 12, 1000, MaxRingSize * 2} {
		if _, err := Apportion([]string{"a"}, size); !errors.Is(err, ErrRingSize) {
			t.Errorf("Apportion(R=%d) = %v, want ErrRingSize", size, err)
		}
	}
	if _, err := Apportion([]string{"a", "b", "a"}, 8); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := Apportion([]string{"a", ""}, 8); !errors.Is(err, ErrEmptyName) {
		t.Errorf("empty name: %v", err)
	}
	if owners, err := Apportion(nil, 8); err != nil || owners != nil {
		t.Errorf("no names: %v, %v", owners, err)
	}
}

func TestMoveVNodes(t *testing.T) {
	owners := []Owner{{"a", 5}, {"b", 3}, {"c", 0}}
	out, err := MoveVNodes(owners, "a", "c", 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Owner{{"a", 1}, {"b", 3}, {"c", 4}}; !slices.Equal(out, want) {
		t.Fatalf("MoveVNodes = %v, want %v", out, want)
	}
	if owners[0].VNodes != 5 {
		t.Fatal("MoveVNodes modified its argument")
	}
	// The giver keeps its lowest indices: a's remaining entry is a_0, and
	// c's entries are c_0..c_3.
	r, err := New(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Entries() {
		if r.Owners()[e.Owner].Name == "a" && e.Index != 0 {
			t.Fatalf("a kept index %d", e.Index)
		}
	}
	for _, c := range []struct {
		from, to string
		n        int
		msg      string
	}{
		{"a", "b", -1, "negative"},
		{"a", "a", 1, "itself"},
		{"a", "zz", 1, "unknown"},
		{"zz", "a", 1, "unknown"},
		{"b", "a", 4, "has 3"},
	} {
		_, err := MoveVNodes(owners, c.from, c.to, c.n)
		if !errors.Is(err, ErrMove) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("MoveVNodes(%s -> %s, %d) = %v, want ErrMove (%s)", c.from, c.to, c.n, err, c.msg)
		}
	}
	// Any sequence of moves keeps the sum.
	rng := rand.New(rand.NewPCG(testSeed(t), 10))
	cur := slices.Clone(owners)
	for range 1000 {
		from, to := cur[rng.IntN(3)].Name, cur[rng.IntN(3)].Name
		next, err := MoveVNodes(cur, from, to, rng.IntN(4))
		if err != nil {
			continue
		}
		cur = next
		sum := 0
		for _, o := range cur {
			sum += o.VNodes
			if o.VNodes < 0 {
				t.Fatalf("negative count: %v", cur)
			}
		}
		if sum != 8 {
			t.Fatalf("sum %d after moves: %v", sum, cur)
		}
	}
}

// TestApportionMatchesSortedOrder checks Apportion, which selects the owners
// with an extra node, against the definition: sort by (hash, name), the
// first total%n get one more.
func TestApportionMatchesSortedOrder(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 21))
	for _, n := range []int{2, 17, 500, 5000} {
		for _, size := range []int{64, 8192, 1 << 16} {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("10.%d.%d:%d", rng.IntN(256), i, rng.IntN(65536))
			}
			got, err := Apportion(names, size)
			if err != nil {
				t.Fatal(err)
			}
			byKey := slices.Clone(names)
			slices.SortFunc(byKey, func(a, b string) int {
				return cmp.Or(cmp.Compare(HashString(a), HashString(b)), strings.Compare(a, b))
			})
			want := map[string]int{}
			for i, name := range byKey {
				want[name] = size / n
				if i < size%n {
					want[name]++
				}
			}
			for _, o := range got {
				if o.VNodes != want[o.Name] {
					t.Fatalf("seed %d n=%d R=%d: %s has %d, want %d", seed, n, size, o.Name, o.VNodes, want[o.Name])
				}
			}
			if !IsApportioned(got, size) {
				t.Fatalf("seed %d n=%d R=%d: IsApportioned(Apportion) = false", seed, n, size)
			}
			if size%n != 0 {
				// Move the extra node of the last owner in the order that
				// has one to the first that has none: same sum, same
				// spread, not Apportion's split.
				moved := slices.Clone(got)
				from, to := byKey[size%n-1], byKey[size%n]
				for i := range moved {
					switch moved[i].Name {
					case from:
						moved[i].VNodes--
					case to:
						moved[i].VNodes++
					}
				}
				if IsApportioned(moved, size) {
					t.Fatalf("seed %d n=%d R=%d: IsApportioned true after moving %s's extra node to %s", seed, n, size, from, to)
				}
			}
		}
	}
	if IsApportioned([]Owner{{"a", 3}, {"b", 5}}, 8) || IsApportioned([]Owner{{"a", 4}, {"b", 4}}, 16) {
		t.Fatal("IsApportioned accepts counts that are not an even split of the total")
	}
}

// TestSelectFirst checks the selection against a sort on inputs that
// defeat a naive pivot (sorted, reversed, organ pipe) and at random, for
// every k.
func TestSelectFirst(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 22))
	for _, n := range []int{1, 2, 3, 16, 17, 100, 1000} {
		inputs := map[string][]orderKey{}
		asc := make([]orderKey, n)
		for i := range asc {
			asc[i] = orderKey{h: uint64(i) * 7, name: fmt.Sprint(i), i: int32(i)}
		}
		inputs["sorted"] = asc
		inputs["reversed"] = slices.Clone(asc)
		slices.Reverse(inputs["reversed"])
		pipe := slices.Clone(asc[:n/2])
		for i := n - 1; i >= n/2; i-- {
			pipe = append(pipe, asc[i])
		}
		inputs["organ pipe"] = pipe
		rnd := slices.Clone(asc)
		rng.Shuffle(n, func(i, j int) { rnd[i], rnd[j] = rnd[j], rnd[i] })
		inputs["random"] = rnd
		for name, in := range inputs {
			want := slices.SortedFunc(slices.Values(in), orderKey.compare)
			for k := 1; k <= n; k++ {
				ks := slices.Clone(in)
				selectFirst(ks, k)
				got := slices.SortedFunc(slices.Values(ks[:k]), orderKey.compare)
				if !slices.Equal(got, want[:k]) {
					t.Fatalf("seed %d %s n=%d k=%d: first k are not the k least", seed, name, n, k)
				}
			}
		}
	}
}
