package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestZipfCDF(t *testing.T) {
	cdf, top := zipfCDF(100_000, 1.1)
	if math.Abs(cdf[len(cdf)-1]-1) > 1e-9 || top < 0.13 || top > 0.14 {
		t.Fatalf("cdf end %v, top %v; want 1 and about 0.135", cdf[len(cdf)-1], top)
	}
	_, top = zipfCDF(100_000, 0.8)
	if top < 0.02 || top > 0.025 {
		t.Fatalf("zipf 0.8 top key %v; want about 0.022", top)
	}
}

// TestSummaryAndSection: the figures are read at the documented points,
// moves after convergence counted in both halves, and the section carries
// the exact result lines.
func TestSummaryAndSection(t *testing.T) {
	o := options{duration: 40 * time.Second, converge: 10 * time.Second, window: 5 * time.Second}
	r := &nsRun{Name: "z", Zipf: 0.8, Policy: "fit",
		Seconds: []float64{5, 10, 15, 20, 25, 30, 35, 40},
		MaxMean: []float64{1.3, 1.08, 1.05, 1.04, 1.4, 1.09, 1.06, 1.05},
		Moved:   []uint64{0, 10, 10, 12, 12, 20, 20, 20}}
	s := r.summarize(o)
	if s.at60 != 1.08 || s.at60shift != 1.09 {
		t.Fatalf("at %v, after the shift %v", s.at60, s.at60shift)
	}
	// Moves after convergence: 10 -> 12 in [10, 20], 20 -> 20 in [30, 40]:
	// 2 in 20 s.
	if math.Abs(s.movesPerMin-6) > 1e-9 {
		t.Fatalf("moves/min %v, want 6", s.movesPerMin)
	}
	res := &result{Owners: 8, Rate: 1, Keys: 1, Duration: "40s", Lease: "8s", Interval: "15s", Runs: []*nsRun{r}}
	path := filepath.Join(t.TempDir(), "report.md")
	if err := res.appendSection(o, path, []string{filepath.Join(filepath.Dir(path), "balance", "balance-zipf0.8.png")}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	want := "balance zipf=0.8 policy=fit: max/mean 1.08 at 10s, moves/min after convergence 6, republished after drain -\n"
	if !strings.Contains(string(b), want) || !strings.Contains(string(b), "](balance/balance-zipf0.8.png)") {
		t.Fatalf("section:\n%s\nwant the line %q and the plot linked relative to the report", b, want)
	}
}

// TestKeysByZipfOnly: a Zipf parameter's keys depend on the seed and the
// parameter only, not on which policies run beside it.
func TestKeysByZipfOnly(t *testing.T) {
	a, ta := drawKeys(1, 1.1, 1000)
	b, tb := drawKeys(1, 1.1, 1000)
	c, _ := drawKeys(1, 0.8, 1000)
	if a[0][0] != b[0][0] || a[1][7] != b[1][7] || ta != tb {
		t.Fatal("the same seed and Zipf parameter drew different keys")
	}
	if a[0][0] == c[0][0] && a[0][1] == c[0][1] {
		t.Fatal("Zipf 0.8 and 1.1 drew the same keys")
	}
	r := &nsRun{Top: ta}
	r.cdf, r.TopKeyShare = zipfCDF(100_000, 1.1)
	if s := r.dominant(8); !strings.Contains(s, ta[0]) || !strings.Contains(s, "13.5%") || !strings.Contains(s, "max/mean 1.08") {
		t.Fatalf("dominant: %s", s)
	}
}
