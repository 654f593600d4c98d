package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/wire"
)

// TestDeployRamp: an instance registered with `cairn register --ramp
// 20s` under a policy slow start of 2 s is served over DNS at a weight
// still below its base long after 2 s, rising as the ramp goes, and at
// its base once the ramp is over; `cairn rollout status` shows it
// ramping as the latest set, then in rotation at full weight (issue 30
// item 5). A real server, the CLI, and SRV queries over UDP.
func TestDeployRamp(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	const (
		svc  = "ramp"
		ramp = 20 * time.Second
	)
	c := StartCluster(t, 1, healthArgs...)
	ctx := ctxT(t, 2*time.Minute)
	n := c.Nodes[0]
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, drain_window: 1h, slow_start: 2s}"))
	registerLoopback(ctx, t, c, svc, "old-0", 8080, func(r *wire.Registration) { r.Addresses = []string{"127.0.0.81"} })

	rollout := func() (wire.Rollout, error) {
		var ro wire.Rollout
		err := json.Unmarshal(runCLI(ctx, t, n, "-o", "json", "rollout", "status", healthNS+"/"+svc), &ro)
		return ro, err
	}
	// The first registration is a rollout of its own: wait for it to be
	// over, so that the next registration begins a new one.
	Eventually(t, 30*time.Second, func() error {
		ro, err := rollout()
		if err != nil {
			return err
		}
		if !ro.Summary.Complete || ro.Summary.Latest != 1 {
			return fmt.Errorf("old-0's rollout: %+v", ro.Summary)
		}
		return nil
	})

	var reg wire.Registered
	out := runCLI(ctx, t, n, "-o", "json", "register", "--instance", "new-0", "--address", "127.0.0.82", "--port", "http=8080",
		"--ramp", ramp.String(), healthNS+"/"+svc)
	if err := json.Unmarshal(out, &reg); err != nil || reg.Ramp.D() != ramp {
		t.Fatalf("register --ramp %v: %s (%v)", ramp, out, err)
	}
	start := reg.RegisteredAt // the server's clock, the same machine's

	// srvWeight is new-0's SRV weight as the node's DNS server answers
	// it now (0: not in the answer).
	srvName := fmt.Sprintf("_http._tcp.%s.%s.svc.cairn.internal.", svc, healthNS)
	srvWeight := func() (int, error) {
		r, err := ask(n.DNSAddr, srvName, dns.TypeSRV)
		if err != nil {
			return 0, err
		}
		for _, rr := range r.Answer {
			if s, ok := rr.(*dns.SRV); ok && strings.HasPrefix(s.Target, "new-0.") {
				return int(s.Weight), nil
			}
		}
		return 0, nil
	}

	// Sample the weight until the ramp is over: it is below the base
	// from the first answer on, still well after the policy's 2 s, never
	// falls, and reaches 100 only once 20 s have passed.
	var samples samples
	sawRampingRollout := false
	err := Poll(ramp+20*time.Second, 200*time.Millisecond, func() error {
		w, err := srvWeight()
		age := time.Since(start)
		if err != nil {
			return err
		}
		if w == 0 {
			if len(samples) > 0 {
				return &stopPolling{fmt.Errorf("new-0 left the SRV answer at %v after being served (samples %v)", age, samples)}
			}
			return errors.New("new-0 is not served yet")
		}
		if len(samples) > 0 && w < samples[len(samples)-1].weight {
			return &stopPolling{fmt.Errorf("the weight fell from %d to %d at %v", samples[len(samples)-1].weight, w, age)}
		}
		samples = append(samples, sample{age, w})
		if w == 100 && age < ramp {
			return &stopPolling{fmt.Errorf("full weight after %v, before the %v ramp ended (samples %v)", age, ramp, samples)}
		}
		if !sawRampingRollout && age > 5*time.Second && age < ramp-5*time.Second {
			ro, err := rollout()
			if err != nil {
				return err
			}
			if in := ro.Instances[0]; in.InstanceID != "new-0" || !in.Latest || in.Phase != wire.PhaseRamping || in.SlowStart.D() != ramp ||
				ro.Summary.Latest != 1 || ro.Summary.Ramping != 1 || ro.Summary.InRotation != 1 || ro.Summary.Complete {
				return &stopPolling{fmt.Errorf("%v into the ramp, rollout status says %+v, first row %+v; want new-0 alone in the latest set, ramping over 20s",
					age, ro.Summary, ro.Instances[0])}
			}
			sawRampingRollout = true
		}
		if w < 100 {
			return fmt.Errorf("weight %d at %v", w, age)
		}
		return nil
	})
	t.Logf("new-0's SRV weight by time since its registration: %v", samples)
	if err != nil {
		t.Fatal(err)
	}
	if !sawRampingRollout {
		t.Error("rollout status was never read while new-0 ramped")
	}
	// Well after the policy's 2 s, the weight was still below the base
	// and rising: a sample past 5 s below 80, and a later one above it.
	var mid, late bool
	for _, s := range samples {
		mid = mid || s.age > 5*time.Second && s.weight < 80
		late = late || mid && s.weight > 80 && s.weight < 100
	}
	if !mid || !late {
		t.Errorf("the weight did not rise over the ramp past the policy's 2 s: %v", samples)
	}

	Eventually(t, 10*time.Second, func() error {
		ro, err := rollout()
		if err != nil {
			return err
		}
		in := ro.Instances[0]
		if in.InstanceID != "new-0" || in.Phase != wire.PhaseFullWeight || in.Weight != in.BaseWeight || in.RampPercent != 100 ||
			ro.Summary != (wire.RolloutSummary{Instances: 2, Latest: 1, InRotation: 1, FullWeight: 1, Complete: true}) {
			return fmt.Errorf("rollout status %+v, first row %+v; want new-0 in rotation at full weight", ro.Summary, in)
		}
		return nil
	})
	table := string(runCLI(ctx, t, n, "rollout", "status", healthNS+"/"+svc))
	if !strings.Contains(table, "full_weight") || !strings.Contains(table, "complete") {
		t.Errorf("rollout status table:\n%s", table)
	}
}

// sample is one SRV weight and when it was read, since the registration.
type sample struct {
	age    time.Duration
	weight int
}

// samples prints as "age:weight" at each change of weight.
type samples []sample

func (ss samples) String() string {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 && s.weight == ss[i-1].weight {
			continue
		}
		fmt.Fprintf(&b, "%.1fs:%d ", s.age.Seconds(), s.weight)
	}
	return strings.TrimSpace(b.String())
}
