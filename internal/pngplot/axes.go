package pngplot

import (
	"fmt"
	"image"
	"image/color"
	"math"
)

// Axes map values to the pixels of a plot area: X from XMin at the left
// edge to XMax at the right, Y from YMin at the bottom to YMax at the
// top. Values outside are clamped to the edges.
type Axes struct {
	Area       image.Rectangle
	XMin, XMax float64
	YMin, YMax float64
}

// X returns the column of x.
func (a Axes) X(x float64) int {
	return a.Area.Min.X + int(math.Round(frac(x, a.XMin, a.XMax)*float64(a.Area.Dx())))
}

// Y returns the row of y.
func (a Axes) Y(y float64) int {
	return a.Area.Max.Y - int(math.Round(frac(y, a.YMin, a.YMax)*float64(a.Area.Dy())))
}

func frac(v, lo, hi float64) float64 {
	if hi <= lo || math.IsNaN(v) {
		return 0
	}
	return math.Min(1, math.Max(0, (v-lo)/(hi-lo)))
}

// Draw draws the grid at the ticks of both axes, their labels (left of
// the area and below it), and the frame.
func (a Axes) Draw(c *Canvas) {
	r := a.Area
	for _, v := range Ticks(a.XMin, a.XMax, 10) {
		x := a.X(v)
		c.Line(x, r.Min.Y, x, r.Max.Y, Grey)
		s := Label(v)
		c.Text(x-TextWidth(s)/2, r.Max.Y+8, s, Black)
	}
	for _, v := range Ticks(a.YMin, a.YMax, 6) {
		y := a.Y(v)
		c.Line(r.Min.X, y, r.Max.X, y, Grey)
		s := Label(v)
		c.Text(r.Min.X-TextWidth(s)-6, y-TextHeight/2, s, Black)
	}
	for _, l := range [][4]int{{r.Min.X, r.Min.Y, r.Max.X, r.Min.Y}, {r.Min.X, r.Max.Y, r.Max.X, r.Max.Y},
		{r.Min.X, r.Min.Y, r.Min.X, r.Max.Y}, {r.Max.X, r.Min.Y, r.Max.X, r.Max.Y}} {
		c.Line(l[0], l[1], l[2], l[3], Black)
	}
}

// Ticks returns round values from lo to hi, about n of them: steps of 1,
// 2 or 5 times a power of ten.
func Ticks(lo, hi float64, n int) []float64 {
	if !(hi > lo) || n < 1 {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	e := math.Floor(math.Log10(raw))
	p := math.Pow(10, e)
	m := 10.0
	for _, f := range []float64{1, 2, 5} {
		if f*p >= raw {
			m = f
			break
		}
	}
	step := m * p
	// k·m·10^e, computed so that 3 × 0.2 is 0.6: divided by an exact
	// power of ten when e is negative.
	at := func(k float64) float64 {
		if e < 0 {
			return k * m / math.Pow(10, -e)
		}
		return k * step
	}
	var out []float64
	for k := math.Ceil(lo/step - 1e-9); at(k) <= hi+step*1e-9 && len(out) <= 4*n; k++ {
		out = append(out, at(k)+0) // +0: no -0
	}
	return out
}

// Label formats a tick value briefly.
func Label(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e7 {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.3g", v)
}

// Palette returns the i-th of a set of distinct series colours.
func Palette(i int) color.RGBA {
	p := []color.RGBA{
		{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
		{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
		{188, 189, 34, 255}, {23, 190, 207, 255},
	}
	return p[((i%len(p))+len(p))%len(p)]
}
