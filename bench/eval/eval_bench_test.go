// Package evalbench measures the evaluator's throughput in evidence
// samples per second (issue 3): eval.Evaluate on one service of N
// instances, each bringing new evidence to every evaluation, as the
// evaluation loop will call it once a second.
//
// Every instance is ready, healthy and in one of 9 zones; each evaluation
// advances now by 1s and brings each instance one new probe sample, or
// one probe and one outcome sample. The measured state is the steady one:
// the benchmark first runs past the first evaluation (a transition per
// instance) and the slow-start window, and checks that the evaluations it
// times publish every instance healthy, with no transition and nothing
// discarded.
//
//	go test -run='^$' -bench=. -benchmem -count=3 ./bench/eval/
//
// One op is one evaluation of the whole service; samples/s is N × samples
// per instance / (ns/op), and ns/instance is ns/op / N. The op includes
// stamping the new samples with now, in place (N or 2N stores), the least
// a caller does to hand the evaluator new evidence.
package evalbench

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

func BenchmarkEvaluate(b *testing.B) {
	for _, ev := range []string{"probe", "probe+outcome"} {
		for _, n := range []int{100, 1_000, 10_000} {
			b.Run(fmt.Sprintf("%s/n=%d", ev, n), func(b *testing.B) {
				benchEvaluate(b, n, ev == "probe+outcome", false)
			})
		}
	}
	// The loop's way: one eval.Evaluator for every round, each replaced
	// State recycled.
	for _, n := range []int{100, 1_000, 10_000} {
		b.Run(fmt.Sprintf("probe/reused/n=%d", n), func(b *testing.B) {
			benchEvaluate(b, n, false, true)
		})
	}
}

func benchEvaluate(b *testing.B, n int, outcomes, reuse bool) {
	var p eval.Policy // the defaults: ReadinessProbe, CheckInterval 2s, …
	ins := make([]eval.Instance, n)
	evidence := make(map[string][]eval.Sample, n)
	batches := make([][]eval.Sample, n) // the map's values, to restamp
	for i := range ins {
		id := fmt.Sprintf("i-%05d", i)
		r, z := i%3, (i/3)%3
		ins[i] = eval.Instance{
			ID:          id,
			Incarnation: 1,
			Region:      fmt.Sprintf("region-%d", r),
			Zone:        fmt.Sprintf("region-%d-%c", r, 'a'+z),
			BaseWeight:  100,
			Lifecycle:   status.Ready,
		}
		ss := []eval.Sample{{Class: eval.ClassProbe, Observer: "node-1", Incarnation: 1, OK: true}}
		if outcomes {
			ss = append(ss, eval.Sample{Class: eval.ClassOutcome, Observer: "client-1", Incarnation: 1, Successes: 100})
		}
		evidence[id] = ss
		batches[i] = ss
	}
	perInstance := len(batches[0])

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	advance := func() {
		now = now.Add(time.Second)
		for _, ss := range batches {
			for j := range ss {
				ss[j].At = now
			}
		}
	}
	var (
		st  eval.State
		res eval.Result
		ev  eval.Evaluator
	)
	evaluate := func() {
		if !reuse {
			res, st = eval.Evaluate(p, ins, evidence, st, now)
			return
		}
		var next eval.State
		res, next = ev.Evaluate(p, ins, evidence, st, now)
		ev.Recycle(st)
		st = next
	}
	// Past the first evaluation and the slow-start window.
	for range int(wire.DefaultSlowStart/time.Second) + 2 {
		advance()
		evaluate()
	}
	check(b, res, n, "after warm-up")

	evals := 0
	for b.Loop() {
		advance()
		evaluate()
		evals++
	}
	ns := float64(b.Elapsed().Nanoseconds())
	b.ReportMetric(float64(evals*n*perInstance)/(ns/1e9), "samples/s")
	b.ReportMetric(ns/float64(evals*n), "ns/instance")
	check(b, res, n, "after the timed loop")
}

// check fails b unless res publishes all n instances healthy at full
// weight, with no transition, event or discarded sample: the steady
// state the benchmark claims to measure.
func check(b *testing.B, res eval.Result, n int, when string) {
	b.Helper()
	if len(res.Instances) != n || len(res.Transitions) != 0 || len(res.Events) != 0 || res.Discarded != 0 {
		b.Fatalf("%s: %d instances, %d transitions, %d events, %d discarded; want %d, 0, 0, 0",
			when, len(res.Instances), len(res.Transitions), len(res.Events), res.Discarded, n)
	}
	for _, r := range res.Instances {
		if !r.Eligible || r.Verdict != status.Healthy || r.Weight != 100 {
			b.Fatalf("%s: instance %s eligible=%v verdict=%v weight=%d; want true, healthy, 100",
				when, r.ID, r.Eligible, r.Verdict, r.Weight)
		}
	}
}
