package pngplot

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"testing"
)

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		n      int
		want   string
	}{
		{0, 1, 5, "[0 0.2 0.4 0.6 0.8 1]"},
		{0, 63, 10, "[0 10 20 30 40 50 60]"},
		{0, 0.33, 6, "[0 0.1 0.2 0.3]"},
		{0, 0.33, 10, "[0 0.05 0.1 0.15 0.2 0.25 0.3]"},
		{-2, 3, 5, "[-2 -1 0 1 2 3]"},
		{5, 5, 5, "[5]"},
	} {
		if got := fmt.Sprint(Ticks(c.lo, c.hi, c.n)); got != c.want {
			t.Errorf("Ticks(%v, %v, %d) = %s, want %s", c.lo, c.hi, c.n, got, c.want)
		}
	}
	if Label(20) != "20" || Label(0.25) != "0.25" {
		t.Errorf("labels %q %q", Label(20), Label(0.25))
	}
}

func TestAxes(t *testing.T) {
	a := Axes{Area: image.Rect(10, 20, 110, 220), XMin: 0, XMax: 10, YMin: 0, YMax: 1}
	for _, c := range []struct {
		x, y         float64
		wantX, wantY int
	}{{0, 0, 10, 220}, {10, 1, 110, 20}, {5, 0.5, 60, 120}, {-3, 7, 10, 20}} {
		if x, y := a.X(c.x), a.Y(c.y); x != c.wantX || y != c.wantY {
			t.Errorf("(%v, %v) → (%d, %d), want (%d, %d)", c.x, c.y, x, y, c.wantX, c.wantY)
		}
	}
}

// TestDraw: lines reach both ends, text draws glyph pixels at Scale and
// nothing for characters the font lacks, drawing outside is clipped,
// and the canvas encodes as a PNG of its size.
func TestDraw(t *testing.T) {
	c := New(40, 30)
	c.Line(2, 3, 30, 25, Black)
	if c.RGBAAt(2, 3) != Black || c.RGBAAt(30, 25) != Black {
		t.Error("a line misses an end")
	}
	c.Line(-5, -5, 100, 100, Green) // clipped, no panic
	c.Text(1, 1, "1", Black)
	// '1' is ".#." on its first row: the second column, Scale wide.
	if c.RGBAAt(1+Scale, 1) != Black || c.RGBAAt(1, 1) == Black {
		t.Error("the glyph of 1 is not where it should be")
	}
	before := append([]uint8(nil), c.Pix...)
	c.Text(20, 10, "_=", Black)
	if !bytes.Equal(before, c.Pix) {
		t.Error("characters without a glyph drew something")
	}
	if TextWidth("abc") != 3*4*Scale {
		t.Errorf("TextWidth %d", TextWidth("abc"))
	}
	b, err := c.PNG()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds() != image.Rect(0, 0, 40, 30) {
		t.Fatalf("decoded %v, %v", img.Bounds(), err)
	}
	if Palette(0) == Palette(1) || Palette(-1) != Palette(9) {
		t.Error("palette")
	}
}
