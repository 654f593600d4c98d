package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
)

// TestRegion: the region comes up at its size, every instance registered
// with an incarnation, the fleet answers as each kind should, the
// third-party instance is served without a check, and the leased
// instances are renewed through the CLI. It records how long the region
// took to come up and the fleet's memory.
func TestRegion(t *testing.T) {
	cfg := SizeConfig()
	res := NewResult("region", "The simulated region comes up")
	r := StartRegion(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	// Not a SPEC figure: a bound that catches a region that does not come
	// up, with room for make test's load (-race, two packages at once on
	// two cores); the figure itself is the value (seconds, both sizes).
	const upBudget = 3 * time.Minute
	res.Add("region up (servers, fleet, apply, register, settle, agents)", "< "+upBudget.String(),
		r.StartTimes.Total.Round(10*time.Millisecond).String(), r.StartTimes.Total < upBudget)
	res.Note("%s", r.StartTimes)
	began := time.Now()
	if err := r.WaitHealthy(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	healthy := r.StartTimes.Total + time.Since(began)
	res.Add("every checked instance judged healthy by its probes, from the start", "< "+upBudget.String(),
		healthy.Round(10*time.Millisecond).String(), healthy < upBudget)

	insts := r.Instances()
	registered, leased := 0, 0
	for _, in := range insts {
		if in.Incarnation > 0 {
			registered++
		}
		if in.Registrar == ByCLI {
			leased++
		}
	}
	res.Add("instances registered with an incarnation", fmt.Sprintf("%d", cfg.Instances), fmt.Sprintf("%d", registered), registered == cfg.Instances && len(insts) == cfg.Instances)
	res.Add("services", fmt.Sprintf("%d", cfg.Services), fmt.Sprintf("%d", len(r.Services)), len(r.Services) == cfg.Services)

	rss, err := r.Fleet.RSS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Fleet.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rssBudget := int64(32<<20) + int64(cfg.Instances)*64<<10 // 32 MiB, and 64 KiB an instance
	res.Add(fmt.Sprintf("fleet RSS at %d instances", st.Instances), fmt.Sprintf("< %d MiB", rssBudget>>20),
		fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)), rss < rssBudget && st.Listening == cfg.Instances)
	res.Note("fleet: %d instances listening, %d goroutines", st.Listening, st.Goroutines)

	// Each kind answers as the package doc says, on its own address.
	for _, kind := range []string{fleet.KindHTTP, fleet.KindTCP} {
		var in Instance
		for _, i := range insts {
			if i.Kind == kind {
				in = i
				break
			}
		}
		got, err := callOnce(in)
		res.Add("a "+kind+" instance answers with its id", in.ID, got, err == nil && got == in.ID)
	}

	// The third-party instance: readiness none, no check, served.
	tp := r.InstancesOf("third-party")
	eps, err := r.Node("a").Client().Endpoints(ctx, Namespace, "third-party")
	if err != nil {
		t.Fatal(err)
	}
	served := len(eps) == 1 && len(tp) == 1 && eps[0].InstanceID == tp[0].ID && eps[0].Eligible
	res.Add("third-party instance (readiness none) served", "eligible", fmt.Sprintf("%d endpoints, eligible=%v", len(eps), served), served)

	// The leased instances are renewed: a round of cairn renew passes.
	if err := integration.Poll(2*cfg.LeaseTTL, 100*time.Millisecond, func() error {
		if n := r.RenewRounds(); n < 1 {
			return fmt.Errorf("%d rounds of renewals", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fails, last := r.RenewFailures()
	res.Add(fmt.Sprintf("leased instances (%d, cairn register --lease-ttl %s)", leased, cfg.LeaseTTL), "0 renew failures",
		fmt.Sprintf("%d", fails), fails == 0)
	if last != nil {
		res.Note("last renew failure: %v", last)
	}
	res.Report(t)
}

// callOnce sends one caller's request to an http or tcp instance and
// returns the id it answers with.
func callOnce(in Instance) (string, error) {
	switch in.Kind {
	case fleet.KindHTTP:
		hc := &http.Client{Timeout: 5 * time.Second}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("http://" + in.HostPort() + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	default:
		c, err := net.DialTimeout("tcp", in.HostPort(), 5*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	}
}
