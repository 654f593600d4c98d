// Package pngplot draws charts as PNG images with the standard library
// only: a canvas, filled rectangles, lines, text in a built-in 3×5 pixel
// font, and axes that map values to pixels. The benchmark plots
// (bench/cmd/xdsplot) and the scenario report draw with it.
package pngplot

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"strings"
)

// Scale is the size in pixels of one pixel of the font.
const Scale = 2

// The colours every chart uses.
var (
	White = color.RGBA{255, 255, 255, 255}
	Black = color.RGBA{0, 0, 0, 255}
	Grey  = color.RGBA{210, 210, 210, 255}
	Green = color.RGBA{30, 150, 60, 255}
)

// Canvas is an image being drawn on. Drawing outside it is clipped.
type Canvas struct {
	*image.RGBA
	glyphs map[rune][5]string
}

// New returns a white canvas of w×h pixels.
func New(w, h int) *Canvas {
	c := &Canvas{RGBA: image.NewRGBA(image.Rect(0, 0, w, h)), glyphs: font()}
	c.Fill(c.Bounds(), White)
	return c
}

// PNG encodes the canvas.
func (c *Canvas) PNG() ([]byte, error) {
	var b bytes.Buffer
	if err := png.Encode(&b, c.RGBA); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Fill paints r.
func (c *Canvas) Fill(r image.Rectangle, col color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.SetRGBA(x, y, col)
		}
	}
}

// Line draws a one-pixel line (Bresenham).
func (c *Canvas) Line(x0, y0, x1, y1 int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	b := c.Bounds()
	for i := 0; i < 4*(b.Dx()+b.Dy()); i++ { // bounded: a line crosses at most the image
		c.SetRGBA(x0, y0, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else if e2 <= dx {
			e += dx
			y0 += sy
		} else {
			e += dx + dy
			x0 += sx
			y0 += sy
		}
	}
}

// Thick draws a line about two pixels wide.
func (c *Canvas) Thick(x0, y0, x1, y1 int, col color.RGBA) {
	c.Line(x0, y0, x1, y1, col)
	c.Line(x0, y0+1, x1, y1+1, col)
	c.Line(x0+1, y0, x1+1, y1, col)
}

// Dashed draws a vertical dashed line from y0 down to y1.
func (c *Canvas) Dashed(x, y0, y1 int, col color.RGBA) {
	for y := y0; y < y1; y += 6 {
		c.Line(x, y, x, y+2, col)
	}
}

// Text writes s at (x, y), its top left corner, in the 3×5 font at
// Scale, lower case; characters the font lacks are left blank.
func (c *Canvas) Text(x, y int, s string, col color.RGBA) {
	for _, ch := range strings.ToLower(s) {
		g, ok := c.glyphs[ch]
		if ok {
			for row, bits := range g {
				for i, b := range bits {
					if b == '#' {
						c.Fill(image.Rect(x+i*Scale, y+row*Scale, x+(i+1)*Scale, y+(row+1)*Scale), col)
					}
				}
			}
		}
		x += 4 * Scale
	}
}

// TextWidth is the width in pixels Text takes for s.
func TextWidth(s string) int { return len([]rune(s)) * 4 * Scale }

// TextHeight is the height in pixels of a line of Text.
const TextHeight = 5 * Scale

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// font returns the 3×5 glyphs, five rows of three each.
func font() map[rune][5]string {
	return map[rune][5]string{
		'0': {"###", "#.#", "#.#", "#.#", "###"}, '1': {".#.", "##.", ".#.", ".#.", "###"},
		'2': {"###", "..#", "###", "#..", "###"}, '3': {"###", "..#", "###", "..#", "###"},
		'4': {"#.#", "#.#", "###", "..#", "..#"}, '5': {"###", "#..", "###", "..#", "###"},
		'6': {"###", "#..", "###", "#.#", "###"}, '7': {"###", "..#", "..#", "..#", "..#"},
		'8': {"###", "#.#", "###", "#.#", "###"}, '9': {"###", "#.#", "###", "..#", "###"},
		'.': {"...", "...", "...", "...", ".#."}, '%': {"#.#", "..#", ".#.", "#..", "#.#"},
		'/': {"..#", "..#", ".#.", "#..", "#.."}, '-': {"...", "...", "###", "...", "..."},
		',': {"...", "...", "...", ".#.", "#.."}, '(': {".#.", "#..", "#..", "#..", ".#."},
		')': {".#.", "..#", "..#", "..#", ".#."}, ':': {"...", ".#.", "...", ".#.", "..."},
		'a': {".#.", "#.#", "###", "#.#", "#.#"}, 'b': {"##.", "#.#", "##.", "#.#", "##."},
		'c': {"###", "#..", "#..", "#..", "###"}, 'd': {"##.", "#.#", "#.#", "#.#", "##."},
		'e': {"###", "#..", "##.", "#..", "###"}, 'f': {"###", "#..", "##.", "#..", "#.."},
		'g': {"###", "#..", "#.#", "#.#", "###"}, 'h': {"#.#", "#.#", "###", "#.#", "#.#"},
		'i': {"###", ".#.", ".#.", ".#.", "###"}, 'j': {"..#", "..#", "..#", "#.#", "###"},
		'k': {"#.#", "#.#", "##.", "#.#", "#.#"}, 'l': {"#..", "#..", "#..", "#..", "###"},
		'm': {"#.#", "###", "###", "#.#", "#.#"}, 'n': {"##.", "#.#", "#.#", "#.#", "#.#"},
		'o': {"###", "#.#", "#.#", "#.#", "###"}, 'p': {"###", "#.#", "###", "#..", "#.."},
		'q': {"###", "#.#", "#.#", "###", "..#"}, 'r': {"##.", "#.#", "##.", "#.#", "#.#"},
		's': {"###", "#..", "###", "..#", "###"}, 't': {"###", ".#.", ".#.", ".#.", ".#."},
		'u': {"#.#", "#.#", "#.#", "#.#", "###"}, 'v': {"#.#", "#.#", "#.#", "#.#", ".#."},
		'w': {"#.#", "#.#", "###", "###", "#.#"}, 'x': {"#.#", "#.#", ".#.", "#.#", "#.#"},
		'y': {"#.#", "#.#", ".#.", ".#.", ".#."}, 'z': {"###", "..#", ".#.", "#..", "###"},
	}
}
