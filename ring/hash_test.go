package ring

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestHashVectors(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"abc", 0x44bc2cf5ad770999},
		{"The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bc},
		// 63 bytes: every code path (32-byte stripes, 8-, 4- and 1-byte tails).
		{"Call me Ishmael. Some years ago--never mind how long precisely-", 0x02a2e85470d6fd96},
	} {
		if got := HashString(c.in); got != c.want {
			t.Errorf("HashString(%q) = %#x, want %#x", c.in, got, c.want)
		}
		if got := Hash([]byte(c.in)); got != c.want {
			t.Errorf("Hash(%q) = %#x, want %#x", c.in, got, c.want)
		}
		if got := refXXH64([]byte(c.in), 0); got != c.want {
			t.Errorf("refXXH64(%q) = %#x, want %#x", c.in, got, c.want)
		}
	}
}

// TestHashMatchesReference compares Hash with refXXH64, written from the
// XXH64 specification, on random inputs of every length up to 300 bytes.
func TestHashMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	buf := make([]byte, 300)
	for n := 0; n <= len(buf); n++ {
		for i := range buf[:n] {
			buf[i] = byte(rng.Uint32())
		}
		if got, want := Hash(buf[:n]), refXXH64(buf[:n], 0); got != want {
			t.Fatalf("len %d: Hash = %#x, reference %#x", n, got, want)
		}
		if got, want := HashString(string(buf[:n])), Hash(buf[:n]); got != want {
			t.Fatalf("len %d: HashString = %#x, Hash %#x", n, got, want)
		}
	}
}

func TestEntryHash(t *testing.T) {
	names := []string{"a", "127.0.0.1:90", "owner-7", strings.Repeat("x", 127), strings.Repeat("long", 100)}
	for _, name := range names {
		for _, i := range []int{0, 1, 9, 10, 99, 4095, 1<<23 - 1, -1} {
			want := HashString(name + "_" + strconv.Itoa(i))
			if got := EntryHash(name, i); got != want {
				t.Errorf("EntryHash(%q, %d) = %#x, want %#x", name, i, got, want)
			}
		}
	}
	// Envoy's Basic ring lists 127.0.0.1:94 at these two positions.
	got := []uint64{EntryHash("127.0.0.1:94", 0), EntryHash("127.0.0.1:94", 1)}
	slices.Sort(got)
	if want := []uint64{833437586790550860, 15516499411664133160}; !slices.Equal(got, want) {
		t.Errorf("entries of 127.0.0.1:94 = %v, want %v", got, want)
	}
	// New's own hashing agrees with EntryHash.
	r, err := New([]Owner{{Name: "n", VNodes: 50}, {Name: strings.Repeat("y", 200), VNodes: 20}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Entries() {
		if want := EntryHash(r.Owners()[e.Owner].Name, int(e.Index)); e.Hash != want {
			t.Errorf("entry %+v, EntryHash %#x", e, want)
		}
	}
}

const (
	xp1 uint64 = 11400714785074694791
	xp2 uint64 = 14029467366897019727
	xp3 uint64 = 1609587929392839161
	xp4 uint64 = 9650029242287828579
	xp5 uint64 = 2870177450012600261
)

// refXXH64 is a deliberately plain XXH64, following the specification
// step by step, as an independent check of the library.
func refXXH64(b []byte, seed uint64) uint64 {
	round := func(acc, lane uint64) uint64 {
		acc += lane * xp2
		acc = bits.RotateLeft64(acc, 31)
		return acc * xp1
	}
	merge := func(acc, v uint64) uint64 {
		acc ^= round(0, v)
		return acc*xp1 + xp4
	}
	n := uint64(len(b))
	var acc uint64
	if len(b) >= 32 {
		v := [4]uint64{seed + xp1 + xp2, seed + xp2, seed, seed - xp1}
		for len(b) >= 32 {
			for i := range v {
				v[i] = round(v[i], binary.LittleEndian.Uint64(b[8*i:]))
			}
			b = b[32:]
		}
		acc = bits.RotateLeft64(v[0], 1) + bits.RotateLeft64(v[1], 7) +
			bits.RotateLeft64(v[2], 12) + bits.RotateLeft64(v[3], 18)
		for _, x := range v {
			acc = merge(acc, x)
		}
	} else {
		acc = seed + xp5
	}
	acc += n
	for len(b) >= 8 {
		acc ^= round(0, binary.LittleEndian.Uint64(b))
		acc = bits.RotateLeft64(acc, 27)*xp1 + xp4
		b = b[8:]
	}
	if len(b) >= 4 {
		acc ^= uint64(binary.LittleEndian.Uint32(b)) * xp1
		acc = bits.RotateLeft64(acc, 23)*xp2 + xp3
		b = b[4:]
	}
	for _, c := range b {
		acc ^= uint64(c) * xp5
		acc = bits.RotateLeft64(acc, 11) * xp1
	}
	acc ^= acc >> 33
	acc *= xp2
	acc ^= acc >> 29
	acc *= xp3
	acc ^= acc >> 32
	return acc
}
