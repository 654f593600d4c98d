package scenarios

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The figures of experiment 5, the xDS tier restarted under its
// subscribers (xdsrestart_test.go): SPEC §4's cap on reconnections, as
// xdsserver's admission.go implements it, and how admissions seen by
// clients are counted against it.
const (
	// xrWindow, xrFraction and xrFloor are the cap: after a restart at
	// most xrFraction of the expected subscriber count, and at least
	// xrFloor, per xrWindow (fixed windows from the server's start:
	// docs/decisions.md, "Subscribers come back gradually").
	xrWindow   = 10 * time.Second
	xrFraction = 0.05
	xrFloor    = 50
)

// xrCap is the most streams a server may admit per xrWindow after a
// restart when it expects expected subscribers.
func xrCap(expected int) int {
	return max(int(math.Ceil(xrFraction*float64(expected))), xrFloor)
}

// xrAdmit is one stream admitted, as its client saw it: the server
// admitted it between the first request (sent) and the first answer.
type xrAdmit struct {
	sent, answered time.Time
}

// xrWindowCounts counts admissions in the fixed windows of xrWindow
// from anchor (the server's start): certain[k] those whose [sent,
// answered] lies within window k, so that the server admitted them in
// it; possible[k] those that overlap it. An admission before anchor
// counts in window 0.
func xrWindowCounts(as []xrAdmit, anchor time.Time) (certain, possible []int) {
	index := func(t time.Time) int { return max(int(t.Sub(anchor)/xrWindow), 0) }
	grow := func(s []int, k int) []int {
		for len(s) <= k {
			s = append(s, 0)
		}
		return s
	}
	for _, a := range as {
		lo, hi := index(a.sent), index(a.answered)
		certain, possible = grow(certain, hi), grow(possible, hi)
		if lo == hi {
			certain[lo]++
		}
		for k := lo; k <= hi; k++ {
			possible[k]++
		}
	}
	return certain, possible
}

// xrSlidingMax returns the most admissions (by answer) within any span
// of xrWindow: what a sliding window would count. Fixed windows allow up
// to twice the cap there (a window's last admissions and the next one's
// first).
func xrSlidingMax(as []xrAdmit) int {
	ts := make([]time.Time, 0, len(as))
	for _, a := range as {
		ts = append(ts, a.answered)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most, lo := 0, 0
	for hi, t := range ts {
		for t.Sub(ts[lo]) >= xrWindow {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// xrStartLine is the line xdsserver logs when it starts with a count of
// subscribers to expect (server.go).
var xrStartLine = regexp.MustCompile(`^time=(\S+) .*msg="admitting xDS subscribers gradually after a restart".* expected=(\d+) per_10s=(\d+)`)

// xrAdmissionStart finds, in a server's log, the first start of its xDS
// server with a restart's cap at or after since: when the cap's windows
// began, the count it expected and its admissions per window.
func xrAdmissionStart(log []byte, since time.Time) (at time.Time, expected, per int, err error) {
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := xrStartLine.FindSubmatch(sc.Bytes())
		if m == nil {
			continue
		}
		t, terr := time.Parse(time.RFC3339Nano, string(m[1]))
		if terr != nil || t.Before(since) {
			continue
		}
		expected, _ = strconv.Atoi(string(m[2]))
		per, _ = strconv.Atoi(string(m[3]))
		return t, expected, per, nil
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, 0, 0, err
	}
	return time.Time{}, 0, 0, fmt.Errorf("no xDS start with a restart cap logged since %s", since.Format(time.RFC3339Nano))
}

// xrInts formats counts as "a, b, c".
func xrInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
