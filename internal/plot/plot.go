// Package plot draws the benchmarks' PNG plots with the standard library
// alone (image/png and the 5x7 font in font.go): horizontal bars with
// min-max whiskers, and lines. bench/proxybench, bench/balance and bench/ratelimit share it.
package plot

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"
	"strings"
)

const (
	scale   = 2 // font pixels per glyph pixel
	charW   = 6 * scale
	charH   = 8 * scale
	plotW   = 1000
	barH    = 24
	barGap  = 12
	marginT = 50
)

var (
	white   = color.RGBA{255, 255, 255, 255}
	black   = color.RGBA{0, 0, 0, 255}
	grey    = color.RGBA{200, 200, 200, 255}
	palette = []color.RGBA{
		{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
		{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	}
)

// Canvas is a plot being drawn.
type Canvas struct{ *image.RGBA }

// NewCanvas is a white w×h canvas.
func NewCanvas(w, h int) Canvas {
	c := Canvas{image.NewRGBA(image.Rect(0, 0, w, h))}
	draw.Draw(c.RGBA, c.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	return c
}

func (c Canvas) rect(x0, y0, x1, y1 int, col color.Color) {
	draw.Draw(c.RGBA, image.Rect(x0, y0, x1, y1), &image.Uniform{col}, image.Point{}, draw.Src)
}

// line draws a line of width w (Bresenham, thickened).
func (c Canvas) line(x0, y0, x1, y1, w int, col color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	err := dx + dy
	for {
		c.rect(x0-w/2, y0-w/2, x0-w/2+w, y0-w/2+w, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// text draws s in upper case with its top-left corner at (x, y).
func (c Canvas) text(x, y int, s string, col color.Color) {
	for _, r := range strings.ToUpper(s) {
		g, ok := glyphs[r]
		if !ok {
			g = glyphs['?']
		}
		for row := range 7 {
			for bit := range 5 {
				if g[row]&(1<<(4-bit)) != 0 {
					c.rect(x+bit*scale, y+row*scale, x+(bit+1)*scale, y+(row+1)*scale, col)
				}
			}
		}
		x += charW
	}
}

func textW(s string) int { return len([]rune(s)) * charW }

// niceStep is a round tick step for a range up to max.
func niceStep(max float64) float64 {
	if max <= 0 {
		return 1
	}
	raw := max / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// Bar is one Bar: a value with an optional range (Lo = Hi = 0: none).
type Bar struct {
	Label     string
	V, Lo, Hi float64
	Color     int // palette index
}

// HBars draws horizontal bars with their values and min-max whiskers.
func HBars(title, unit string, bars []Bar) Canvas {
	left := 0
	for _, b := range bars {
		left = max(left, textW(b.Label))
	}
	left += 20
	h := marginT + len(bars)*(barH+barGap) + 50
	c := NewCanvas(plotW, h)
	c.text(10, 12, title, black)
	top, right := marginT, plotW-90
	maxV := 0.0
	for _, b := range bars {
		maxV = max(maxV, b.V, b.Hi)
	}
	step := niceStep(maxV)
	maxV = math.Ceil(maxV/step) * step
	if maxV == 0 {
		maxV = 1
	}
	x := func(v float64) int { return left + int(v/maxV*float64(right-left)) }
	bottom := top + len(bars)*(barH+barGap)
	for v := 0.0; v <= maxV+step/2; v += step {
		c.line(x(v), top-4, x(v), bottom, 1, grey)
		s := fmtNum(v)
		c.text(x(v)-textW(s)/2, bottom+6, s, black)
	}
	c.text(right-textW(unit)+60, bottom+26, unit, black)
	for i, b := range bars {
		y := top + i*(barH+barGap)
		c.text(left-10-textW(b.Label), y+(barH-charH)/2+2, b.Label, black)
		c.rect(left, y, max(x(b.V), left+1), y+barH, palette[b.Color%len(palette)])
		if b.Hi > b.Lo {
			mid := y + barH/2
			c.line(x(b.Lo), mid, x(b.Hi), mid, 2, black)
			c.line(x(b.Lo), y+4, x(b.Lo), y+barH-4, 2, black)
			c.line(x(b.Hi), y+4, x(b.Hi), y+barH-4, 2, black)
		}
		s := fmtNum(b.V)
		c.text(max(x(b.V), x(b.Hi))+6, y+(barH-charH)/2+2, s, black)
	}
	c.line(left, top-4, left, bottom, 2, black)
	return c
}

// Series is one line of a line plot.
type Series struct {
	Name  string
	Y     []float64
	Color int // palette index
}

// Lines draws series over categorical x positions named xs (an empty name
// gets no tick), on a log scale when the values span more than a factor of
// 20.
func Lines(title, xunit, yunit string, xs []string, ss []Series) Canvas {
	const left, top, h, w = 110, 80, 540, 1150
	right, bottom := w-420, h-60 // room for the legend's longest name
	c := NewCanvas(w, h)
	c.text(10, 12, title, black)
	lo, hi := math.Inf(1), 0.0
	for _, s := range ss {
		for _, y := range s.Y {
			hi = max(hi, y)
			if y > 0 {
				lo = min(lo, y)
			}
		}
	}
	if hi == 0 {
		hi, lo = 1, 1
	}
	var y func(v float64) int
	var ticks []float64
	if hi/lo > 20 {
		l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if l1 == l0 {
			l1++
		}
		y = func(v float64) int {
			v = max(v, math.Pow(10, l0))
			return bottom - int((math.Log10(v)-l0)/(l1-l0)*float64(bottom-top))
		}
		for e := l0; e <= l1; e++ {
			for _, m := range []float64{1, 2, 5} {
				if v := m * math.Pow(10, e); e < l1 || m == 1 {
					ticks = append(ticks, v)
				}
			}
		}
		yunit += " (log scale)"
	} else {
		step := niceStep(hi)
		yMax := math.Ceil(hi/step) * step
		y = func(v float64) int { return bottom - int(v/yMax*float64(bottom-top)) }
		for v := 0.0; v <= yMax+step/2; v += step {
			ticks = append(ticks, v)
		}
	}
	x := func(i int) int {
		if len(xs) < 2 {
			return left
		}
		return left + i*(right-left)/(len(xs)-1)
	}
	for _, v := range ticks {
		c.line(left, y(v), right, y(v), 1, grey)
		s := fmtNum(v)
		c.text(left-8-textW(s), y(v)-charH/2+2, s, black)
	}
	for i, s := range xs {
		if s == "" {
			continue // an unlabelled position: no tick
		}
		c.line(x(i), top, x(i), bottom, 1, grey)
		c.text(x(i)-textW(s)/2, bottom+8, s, black)
	}
	c.text(10, top-30, yunit, black)
	c.text((left+right)/2-textW(xunit)/2, bottom+30, xunit, black)
	for k, s := range ss {
		col := palette[s.Color%len(palette)]
		for i := 1; i < len(s.Y) && i < len(xs); i++ {
			c.line(x(i-1), y(s.Y[i-1]), x(i), y(s.Y[i]), 3, col)
		}
		ly := top + k*(charH+10)
		c.rect(right+20, ly+2, right+40, ly+charH-4, col)
		c.text(right+48, ly, s.Name, black)
	}
	c.line(left, bottom, right, bottom, 2, black)
	c.line(left, top, left, bottom, 2, black)
	return c
}

// Stack puts canvases one above the other.
func Stack(cs ...Canvas) Canvas {
	h, w := 0, 0
	for _, c := range cs {
		h += c.Bounds().Dy()
		w = max(w, c.Bounds().Dx())
	}
	out := NewCanvas(w, h)
	y := 0
	for _, c := range cs {
		draw.Draw(out.RGBA, c.Bounds().Add(image.Pt(0, y)), c.RGBA, image.Point{}, draw.Src)
		y += c.Bounds().Dy()
	}
	return out
}

// Save writes c as a PNG file.
func (c Canvas) Save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.RGBA); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Caption is a strip of text lines, to stack under a plot.
func Caption(lines ...string) Canvas {
	w := 0
	for _, l := range lines {
		w = max(w, textW(l)+20)
	}
	c := NewCanvas(max(w, 200), 10+len(lines)*(charH+8))
	for i, l := range lines {
		c.text(10, 6+i*(charH+8), l, black)
	}
	return c
}
