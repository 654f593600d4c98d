package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// A service whose policy slow start (2 s) is shorter than the deploy
// ramps its registrations ask for.
const rampYAML = `namespace: shop
name: ramp
ports: [{name: http, number: 8080}]
capability: {readiness: none}
policy: {drain_window: 1h, lease_ttl: 1h, slow_start: 2s}
`

// TestRolloutView: GET …/rollout marks the instances registered since
// the newest rollout began, and counts them in rotation, ramping and at
// full weight as the table serves them; a registration with a ramp
// ramps over the ramp, not the policy's shorter slow start.
func TestRolloutView(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)}
	e := newEnv(t, options{health: true, clock: clk, now: clk.Now, storeClock: true})
	e.apply(t, "", rampYAML)
	path := svcPath("shop", "ramp")
	get := func(t *testing.T) wire.Rollout {
		t.Helper()
		r := e.call(t, http.MethodGet, path+"/rollout", "", "")
		wantStatus(t, r, http.StatusOK)
		return decodeAs[wire.Rollout](t, r)
	}
	register := func(t *testing.T, id, addr, ramp string) wire.Registered {
		t.Helper()
		body := map[string]any{"instance_id": id, "addresses": []string{addr}, "ports": map[string]int{"http": 8080}}
		if ramp != "" {
			body["ramp"] = ramp
		}
		r := e.call(t, http.MethodPost, path+"/instances", "", mustJSON(body))
		wantStatus(t, r, http.StatusCreated)
		return decodeAs[wire.Registered](t, r)
	}
	wantSummary := func(t *testing.T, ro wire.Rollout, want wire.RolloutSummary) {
		t.Helper()
		if ro.Summary != want {
			t.Fatalf("summary %+v, want %+v; instances %+v", ro.Summary, want, ro.Instances)
		}
	}
	byID := func(ro wire.Rollout) map[string]wire.RolloutInstance {
		m := map[string]wire.RolloutInstance{}
		for _, in := range ro.Instances {
			m[in.InstanceID] = in
		}
		return m
	}

	t.Run("no instances", func(t *testing.T) {
		ro := get(t)
		if len(ro.Instances) != 0 || !ro.StartedAt.IsZero() || ro.SlowStart.D() != 2*time.Second {
			t.Fatalf("rollout of an empty service: %+v", ro)
		}
		wantSummary(t, ro, wire.RolloutSummary{})
	})

	register(t, "old-1", "10.0.3.1", "")
	register(t, "old-2", "10.0.3.2", "")
	e.tick(t)
	clk.Advance(10 * time.Second)
	e.tick(t)
	t.Run("the first registrations are a rollout, complete", func(t *testing.T) {
		ro := get(t)
		wantSummary(t, ro, wire.RolloutSummary{Instances: 2, Latest: 2, InRotation: 2, FullWeight: 2, Complete: true})
	})

	clk.Advance(time.Minute)
	first := register(t, "new-1", "10.0.3.3", "20s")
	if first.Ramp.D() != 20*time.Second {
		t.Fatalf("registered with ramp %v, want 20s", first.Ramp)
	}
	e.tick(t)
	clk.Advance(5 * time.Second)
	register(t, "new-2", "10.0.3.4", "20s") // within new-1's ramp: the same rollout
	starting := mustJSON(map[string]any{"instance_id": "new-3", "addresses": []string{"10.0.3.5"}, "ports": map[string]int{"http": 8080},
		"lifecycle": "starting"})
	wantStatus(t, e.call(t, http.MethodPost, path+"/instances", "", starting), http.StatusCreated)
	e.tick(t)
	t.Run("ramping past the policy's slow start", func(t *testing.T) {
		ro := get(t)
		wantSummary(t, ro, wire.RolloutSummary{Instances: 5, Latest: 3, InRotation: 2, Ramping: 2, NotEligible: 1})
		if !ro.StartedAt.Equal(first.RegisteredAt) {
			t.Errorf("started at %v, want new-1's registration %v", ro.StartedAt, first.RegisteredAt)
		}
		var order []string
		for _, in := range ro.Instances {
			order = append(order, in.InstanceID)
		}
		if got := strings.Join(order, " "); got != "new-1 new-2 new-3 old-1 old-2" {
			t.Errorf("order %q, want the latest set in registration order, then the others", got)
		}
		m := byID(ro)
		// new-1 is 5 s into its 20 s ramp: 0.1 + 0.9 × 5/20 = 32.5%;
		// it would be at full weight after the policy's 2 s.
		if in := m["new-1"]; !in.Latest || in.Phase != wire.PhaseRamping || in.Weight != 33 || in.RampPercent != 33 ||
			in.Ramp.D() != 20*time.Second || in.SlowStart.D() != 20*time.Second || !in.Eligible {
			t.Errorf("new-1: %+v; want latest, ramping at 33 of 100 over 20s", in)
		}
		if in := m["new-2"]; in.Phase != wire.PhaseRamping || in.Weight != 10 || in.RampPercent != 10 {
			t.Errorf("new-2: %+v; want ramping at 10 of 100", in)
		}
		if in := m["new-3"]; !in.Latest || in.Phase != wire.PhaseNotEligible || in.Eligible || in.RampPercent != 0 || in.Lifecycle.String() != "starting" {
			t.Errorf("new-3: %+v; want latest, starting, not eligible", in)
		}
		if in := m["old-1"]; in.Latest || in.Phase != wire.PhaseFullWeight || in.Weight != 100 || in.Ramp != 0 || in.SlowStart.D() != 2*time.Second {
			t.Errorf("old-1: %+v; want outside the latest set, at full weight, no ramp, the policy's 2s", in)
		}
	})

	clk.Advance(20 * time.Second)
	e.tick(t)
	t.Run("in rotation at full weight, but for one not eligible", func(t *testing.T) {
		ro := get(t)
		wantSummary(t, ro, wire.RolloutSummary{Instances: 5, Latest: 3, InRotation: 2, FullWeight: 2, NotEligible: 1})
		if in := byID(ro)["new-2"]; in.Weight != 100 || in.RampPercent != 100 || in.Phase != wire.PhaseFullWeight {
			t.Errorf("new-2: %+v; want full weight", in)
		}
	})

	ready := mustJSON(map[string]any{"instance_id": "new-3", "addresses": []string{"10.0.3.5"}, "ports": map[string]int{"http": 8080}})
	wantStatus(t, e.call(t, http.MethodPost, path+"/instances", "", ready), http.StatusOK) // a retry moves starting to ready
	e.tick(t)
	clk.Advance(2 * time.Second) // the policy's slow start: new-3 has no ramp
	e.tick(t)
	t.Run("complete", func(t *testing.T) {
		wantSummary(t, get(t), wire.RolloutSummary{Instances: 5, Latest: 3, InRotation: 3, FullWeight: 3, Complete: true})
	})

	t.Run("a bad ramp is refused, naming the field and the rule, and changes nothing", func(t *testing.T) {
		for ramp, rule := range map[string]string{"-5s": "negative", "2h": "longer than", "1500ms": "whole number of seconds"} {
			before := e.snapshot(t)
			body := mustJSON(map[string]any{"instance_id": "bad", "addresses": []string{"10.0.3.9"}, "ports": map[string]int{"http": 8080}, "ramp": ramp})
			wantError(t, e.call(t, http.MethodPost, path+"/instances", "", body), http.StatusBadRequest, wire.CodeInvalid, "ramp", rule)
			e.wantUnchanged(t, before, "a registration with ramp "+ramp)
		}
		wantError(t, e.call(t, http.MethodPost, path+"/instances", "",
			`{"instance_id": "bad", "addresses": ["10.0.3.9"], "ports": {"http": 8080}, "ramp": 30}`), http.StatusBadRequest, wire.CodeInvalid, "ramp")
	})

	t.Run("an unknown service", func(t *testing.T) {
		wantError(t, e.call(t, http.MethodGet, svcPath("shop", "nope")+"/rollout", "", ""), http.StatusNotFound, wire.CodeNotFound)
	})
}
