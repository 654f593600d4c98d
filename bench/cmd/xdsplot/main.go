// Command xdsplot draws the delivery CDFs of xdsload runs as one PNG:
// withdrawals on the left, admissions on the right, one curve per run,
// the time from the API call's return on a log scale (0.1 ms to 100 s).
// It reads the JSON line of each file named (an xdsload output) and
// draws with internal/pngplot (the standard library and a built-in 3×5
// pixel font).
//
//	go run ./bench/cmd/xdsplot -o docs/xds-steady.png bench/results/xdsload-*-steady-*.txt
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"math"
	"os"

	"github.com/cairn-sd/cairn/internal/pngplot"
)

// run is what xdsplot reads of an xdsload JSON line.
type run struct {
	Target      string    `json:"target"`
	Mode        string    `json:"mode"`
	Streams     int       `json:"streams"`
	Percentiles []float64 `json:"cdf_percentiles"`
	Withdrawals struct {
		CDF []float64 `json:"cdf_ms"`
	} `json:"withdrawals"`
	Admissions struct {
		CDF []float64 `json:"cdf_ms"`
	} `json:"admissions"`
}

func main() {
	out := flag.String("o", "xds.png", "PNG to write")
	title := flag.String("title", "", "a line above the panels (letters, digits and .,%/()- only)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "xdsplot: name xdsload output files")
		os.Exit(2)
	}
	var runs []run
	for _, f := range flag.Args() {
		r, err := read(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "xdsplot:", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	b, err := draw(runs, *title).PNG()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdsplot:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "xdsplot:", err)
		os.Exit(1)
	}
}

// read returns the last JSON line of file.
func read(file string) (run, error) {
	f, err := os.Open(file)
	if err != nil {
		return run{}, err
	}
	defer f.Close()
	var r run
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Bytes(); len(line) > 0 && line[0] == '{' {
			if err := json.Unmarshal(line, &r); err != nil {
				return run{}, fmt.Errorf("%s: %w", file, err)
			}
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return run{}, fmt.Errorf("%s: %w", file, err)
	}
	if !found || len(r.Percentiles) == 0 {
		return run{}, errors.New(file + ": no xdsload JSON line with a CDF")
	}
	return r, nil
}

const (
	width, height = 1240, 560
	panelW        = 540
	panelH        = 400
	top           = 80
	minLog        = -1.0
	maxLog        = 5.0 // 0.1 ms to 100 s
)

// palette returns a run's colour: blues for cairn, oranges for the peer,
// darker with more streams.
func palette(r run, all []run) color.RGBA {
	rank, n := 0, 0
	for _, o := range all {
		if o.Target == r.Target {
			n++
			if o.Streams < r.Streams {
				rank++
			}
		}
	}
	f := 0.0
	if n > 1 {
		f = float64(rank) / float64(n-1)
	}
	lerp := func(a, b uint8) uint8 { return uint8(float64(a) + f*(float64(b)-float64(a))) }
	if r.Target == "cairn" {
		return color.RGBA{lerp(110, 10), lerp(170, 40), lerp(240, 140), 255}
	}
	return color.RGBA{lerp(250, 150), lerp(170, 50), lerp(60, 0), 255}
}

func draw(runs []run, title string) *pngplot.Canvas {
	img := pngplot.New(width, height)
	img.Text(60, 16, title, pngplot.Black)
	for p, name := range []string{"withdrawals: percent delivered by time since the api reply", "admissions: percent delivered by time since the api reply"} {
		x0 := 60 + p*(panelW+80)
		img.Text(x0, top-30, name, pngplot.Black)
		// Grid and axes.
		for e := minLog; e <= maxLog; e++ {
			x := x0 + int((e-minLog)/(maxLog-minLog)*panelW)
			img.Line(x, top, x, top+panelH, pngplot.Grey)
			img.Text(x-12, top+panelH+8, []string{"0.1ms", "1ms", "10ms", "100ms", "1s", "10s", "100s"}[int(e-minLog)], pngplot.Black)
		}
		for _, pc := range []float64{0, 25, 50, 75, 90, 100} {
			y := top + panelH - int(pc/100*panelH)
			img.Line(x0, y, x0+panelW, y, pngplot.Grey)
			img.Text(x0-40, y-5, fmt.Sprintf("%g", pc), pngplot.Black)
		}
		// SPEC targets: withdrawal 1 s (steady) and 5 s (burst), admission 30 s.
		targets := []float64{1000, 5000}
		if p == 1 {
			targets = []float64{30000}
		}
		for _, t := range targets {
			x := x0 + int((math.Log10(t)-minLog)/(maxLog-minLog)*panelW)
			img.Dashed(x, top, top+panelH, pngplot.Green)
		}
		for _, r := range runs {
			cdf := r.Withdrawals.CDF
			if p == 1 {
				cdf = r.Admissions.CDF
			}
			c := palette(r, runs)
			px, py := -1, -1
			for i, v := range cdf {
				lg := math.Log10(math.Max(v, 0.1))
				x := x0 + int((math.Min(lg, maxLog)-minLog)/(maxLog-minLog)*panelW)
				y := top + panelH - int(r.Percentiles[i]/100*panelH)
				if px >= 0 {
					img.Thick(px, py, x, y, c)
				}
				px, py = x, y
			}
		}
	}
	// Legend.
	lx, ly := 60, top+panelH+40
	for i, r := range runs {
		x := lx + (i%4)*290
		y := ly + (i/4)*18
		img.Fill(image.Rect(x, y+2, x+24, y+8), palette(r, runs))
		img.Text(x+32, y, fmt.Sprintf("%s %s %d", r.Target, r.Mode, r.Streams), pngplot.Black)
	}
	return img
}
