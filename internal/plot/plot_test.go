package plot

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// TestLinesSkipsEmptyTicks: a plot with unlabelled positions draws and
// saves a decodable PNG of the documented size.
func TestLinesSkipsEmptyTicks(t *testing.T) {
	c := Lines("max/mean", "s", "ratio", []string{"0", "", "", "30"}, []Series{{Name: "a", Y: []float64{1.4, 1.2, 1.1, 1.05}}})
	path := filepath.Join(t.TempDir(), "x.png")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1150 || b.Dy() != 540 {
		t.Fatalf("size %v", b)
	}
}
