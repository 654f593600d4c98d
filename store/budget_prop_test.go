package store

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
	"pgregory.net/rapid"
)

// TestPropBudget: over random registrations (starting or ready),
// verdicts, drains, deregistrations (judged, sometimes forced) and drain
// windows ending, under a random budget, the FSM refuses a judged
// disruption exactly when it would disrupt an available instance while
// the unavailable ones already fill the budget; a refusal changes
// nothing, and a forced one past the budget leaves one override event.
// No verdict or housekeeping entry is ever refused.
func TestPropBudget(t *testing.T) {
	budgets := []wire.Budget{"", "0", "1", "2", "3", "0%", "10%", "25%", "50%", "100%"}
	ids := []string{"a", "b", "c", "d", "e", "f"}
	rapid.Check(t, func(t *rapid.T) {
		l := newLog(t)
		svc := webService()
		svc.Policy.MaxUnavailable = rapid.SampledFrom(budgets).Draw(t, "budget")
		l.must(applySvc(svc))
		key := svc.Key()
		for i, id := range ids {
			c := registerCmd(id, fmt.Sprintf("10.0.0.%d", i+1))
			c.Register.Lifecycle = rapid.SampledFrom([]string{"ready", "ready", "ready", "starting"}).Draw(t, "lifecycle "+id)
			l.must(c)
		}
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			id := rapid.SampledFrom(ids).Draw(t, "id")
			in := l.f.instances.get(webKey(id))
			inc := in.incarnation
			switch op := rapid.SampledFrom([]string{"verdict", "drain", "deregister", "end", "register"}).Draw(t, "op"); op {
			case "verdict":
				v := rapid.SampledFrom([]status.Verdict{status.Healthy, status.Unknown, status.Unhealthy, status.Quarantined}).Draw(t, "verdict")
				l.must(verdictCmd(id, inc, v, v == status.Healthy || v == status.Unknown))
			case "end": // the drain window is over
				l.must(command{Op: opHousekeep, Terminate: []fence{{webKey(id), inc}}})
			case "register": // a new incarnation of a terminated instance
				if in.lifecycle == status.Terminated {
					l.must(registerCmd(id, "10.0.9.9"))
				}
			default:
				o := opDrain
				if op == "deregister" {
					o = opDeregister
				}
				force := rapid.Float64Range(0, 1).Draw(t, "force") < 0.2
				_, already := unavailable(in)
				available := in.lifecycle == status.Ready && !already
				b := l.f.budget(l.f.services[key])
				full := b.InUse >= b.Limit
				before, events := withoutRev(l.f), len(l.f.state().Events)
				r := l.apply(disrupt(o, id, inc, force))
				switch {
				case in.lifecycle == status.Terminated && o == opDrain:
					if !errors.Is(r.Err, ErrFenced) {
						t.Fatalf("drain of terminated %s: %v, want ErrFenced", id, r.Err)
					}
				case available && full && !force:
					if !errors.Is(r.Err, ErrBudget) {
						t.Fatalf("%s of available %s with %d of %d in use (%+v): %v, want ErrBudget", o, id, b.InUse, b.Limit, b.Unavailable, r.Err)
					}
					if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
						t.Fatalf("a refused %s of %s changed the state", o, id)
					}
				case r.Err != nil:
					t.Fatalf("%s of %s (%s, available %t, %d of %d in use, force %t): %v", o, id, in.lifecycle, available, b.InUse, b.Limit, force, r.Err)
				default:
					overridden := 0
					for _, e := range l.f.state().Events[events:] {
						if e.Kind == wire.EventBudgetOverridden {
							overridden++
						}
					}
					if want := available && full && force; overridden != map[bool]int{true: 1}[want] {
						t.Fatalf("%s of %s: %d override events, want them when forced past the budget (%t)", o, id, overridden, want)
					}
				}
			}
			if b := l.f.budget(l.f.services[key]); b.InUse != len(b.Unavailable) || b.Limit != svc.Policy.MaxUnavailable.Limit(b.Instances) {
				t.Fatalf("budget %+v is not consistent", b)
			}
		}
	})
}
