package eval_test

import (
	"fmt"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
)

// The caller (the evaluation loop, later) keeps the State between
// evaluations and passes the time in.
func ExampleEvaluate() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ins := []eval.Instance{
		{ID: "a", Incarnation: 1, Zone: "z1", Lifecycle: status.Ready},
		{ID: "b", Incarnation: 1, Zone: "z1", Lifecycle: status.Ready},
		{ID: "c", Incarnation: 1, Zone: "z2", Lifecycle: status.Ready},
	}
	var st eval.State
	var res eval.Result
	res, st = eval.Evaluate(eval.Policy{}, ins, nil, st, t0)
	fmt.Println(res.Instances[0].Verdict, res.Instances[0].Eligible, res.Instances[0].Weight)

	refused := map[string][]eval.Sample{"a": {{Class: eval.ClassProbe, Observer: "n1", At: t0.Add(10 * time.Second), Hard: true}}}
	res, _ = eval.Evaluate(eval.Policy{}, ins, refused, st, t0.Add(10*time.Second))
	for _, tr := range res.Transitions {
		fmt.Println(tr)
	}
	// Output:
	// unknown true 10
	// a#1 eligible/unknown -> withdrawn/unhealthy: probe failing: hard failure (connection refused)
}
