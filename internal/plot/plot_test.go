package plot

import (
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// TestLinesSkipsEmptyTicks: a plot with unlabelled positions draws and
// saves a decodable PNG of the documented size.
func TestLinesSkipsEmptyTicks(t *testing.T) {
	c := Lines("max/mean", "s", "ratio", []string{"0", "", "", "30"}, []Series{{Name: "a", Y: []float64{1.4, 1.2, 1.1, 1.05}}})
	img := saved(t, c)
	if b := img.Bounds(); b.Dx() != 1150 || b.Dy() != 540 {
		t.Fatalf("size %v", b)
	}
}

func TestPlotsSave(t *testing.T) {
	c := Stack(
		HBars("bars", "req/s", []Bar{{Label: "a", V: 10, Lo: 8, Hi: 12}, {Label: "b", V: 3, Color: 1}}),
		Lines("lines", "s", "ratio", []string{"0", "", "2"}, []Series{{Name: "x", Y: []float64{1, 0.9, 1.05}}}),
		Caption("25s: an event", "33s: another"))
	img := saved(t, c)
	// Two bars (50 + 2x36 + 50) above a 540-pixel line plot and two lines
	// of caption (10 + 2x24), as wide as the widest.
	if b := img.Bounds(); b.Dy() != 172+540+58 || b.Dx() != 1150 {
		t.Fatalf("size %v", b)
	}
	// The bar a is drawn in the first palette color somewhere.
	found := false
	for y := 0; y < 172 && !found; y++ {
		for x := 0; x < 1000; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r>>8 == 31 && g>>8 == 119 && bl>>8 == 180 {
				found = true
				break
			}
		}
	}
	if !found {
		t.Fatal("no bar drawn")
	}
}

// saved saves c as a PNG file and reads it back.
func saved(t *testing.T, c Canvas) image.Image {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.png")
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
	return img
}
