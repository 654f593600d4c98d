package main

import (
	"image"
	"image/color"
	"math"

	"github.com/cairn-sd/cairn/integration/scenarios"
	"github.com/cairn-sd/cairn/internal/pngplot"
)

// The size of a timeline's PNG and its plot area.
const (
	plotW, plotH = 1000, 520
	areaLeft     = 80
	areaTop      = 60
	areaRight    = plotW - 30
	areaBottom   = 380
	legendTop    = areaBottom + 50
)

// markColour draws the marks (the fault, the heal).
var markColour = color.RGBA{170, 20, 20, 255}

// plotTimeline draws tl: x the seconds since the scenario's start, y
// the value, one colour per series with a legend below, and each mark
// as a dashed vertical line labelled at the top.
func plotTimeline(tl scenarios.Timeline) *pngplot.Canvas {
	c := pngplot.New(plotW, plotH)
	c.Text(areaLeft, 16, tl.Title, pngplot.Black)
	c.Text(areaLeft-60, areaTop-22, tl.YLabel, pngplot.Black)
	xMax, yMin, yMax := 0.0, 0.0, 0.0
	for _, s := range tl.Series {
		for _, p := range s.Points {
			if finite(p.T) && finite(p.V) {
				xMax, yMin, yMax = math.Max(xMax, p.T), math.Min(yMin, p.V), math.Max(yMax, p.V)
			}
		}
	}
	for _, m := range tl.Marks {
		if finite(m.T) {
			xMax = math.Max(xMax, m.T)
		}
	}
	if xMax <= 0 {
		xMax = 1
	}
	if yMax <= yMin {
		yMax = yMin + 1
	}
	ax := pngplot.Axes{Area: image.Rect(areaLeft, areaTop, areaRight, areaBottom),
		XMin: 0, XMax: roundUp(xMax), YMin: -roundUp(-yMin), YMax: roundUp(yMax)}
	ax.Draw(c)
	xl := "seconds since start"
	c.Text((areaLeft+areaRight-pngplot.TextWidth(xl))/2, areaBottom+26, xl, pngplot.Black)

	for i, s := range tl.Series {
		col := pngplot.Palette(i)
		px, py := -1, -1
		for _, p := range s.Points {
			if !finite(p.T) || !finite(p.V) {
				px = -1 // a gap
				continue
			}
			x, y := ax.X(p.T), ax.Y(p.V)
			if px >= 0 {
				c.Thick(px, py, x, y, col)
			} else {
				c.Fill(image.Rect(x-1, y-1, x+2, y+2), col)
			}
			px, py = x, y
		}
		lx, ly := areaLeft+(i%3)*300, legendTop+(i/3)*18
		c.Fill(image.Rect(lx, ly+2, lx+24, ly+8), col)
		c.Text(lx+32, ly, s.Name, pngplot.Black)
	}
	for i, m := range tl.Marks {
		if !finite(m.T) {
			continue
		}
		x := ax.X(m.T)
		c.Dashed(x, areaTop, areaBottom, markColour)
		c.Text(x+4, areaTop+4+(i%4)*(pngplot.TextHeight+4), m.Label, markColour)
	}
	return c
}

// roundUp returns the smallest tick of v's scale at or above v (0 for 0
// or less), so that the axis ends on a labelled value.
func roundUp(v float64) float64 {
	if v <= 0 {
		return 0
	}
	ts := pngplot.Ticks(0, v, 5)
	step := v
	if len(ts) > 1 {
		step = ts[1] - ts[0]
	}
	return math.Ceil(v/step-1e-9) * step
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
