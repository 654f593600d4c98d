package integration

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// TestUIDeployRamp: the service page shows a deploy ramp (issue 30):
// two instances at full weight under a policy slow start of 0s, then a
// third registered with a ramp of 8s; without a reload the page shows
// the rollout in progress (the newcomer alone in the latest set,
// ramping), the newcomer tagged "latest" and "ramp 8s" with a weight
// that rises, then the rollout complete at full weight, as GET
// .../rollout has it. Any JavaScript error fails the test.
func TestUIDeployRamp(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc, ramp = "uiramp", 8 * time.Second
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, drain_window: 1h, slow_start: 0s}"))
	for i := range 2 {
		registerLoopback(ctx, t, c, svc, fmt.Sprintf("old-%d", i), 8080, func(r *wire.Registration) {
			r.Addresses = []string{fmt.Sprintf("127.0.0.%d", 101+i)}
		})
	}
	b := newBrowser(t, ctx)
	q := url.Values{"ns": {healthNS}, "svc": {svc}}
	b.do(t, "open the service page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/service.html?"+q.Encode()),
		chromedp.WaitVisible(`tr[data-instance="old-1"]`))
	cell := func(id, class string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-instance="%s"] td.%s')?.textContent`, id, class)
	}
	rollout := `document.getElementById('rollout').textContent`
	b.waitJS(t, "both at full weight, the rollout complete", fmt.Sprintf(`%s === "100 / 100" && %s === "100 / 100" && %s.endsWith("; complete.")`,
		cell("old-0", "weight-cell"), cell("old-1", "weight-cell"), rollout), 10*time.Second)

	eval[bool](t, b, `window.cairnTestMarker = true`)
	registerLoopback(ctx, t, c, svc, "new-0", 8080, func(r *wire.Registration) {
		r.Addresses, r.Ramp = []string{"127.0.0.103"}, wire.Duration(ramp)
	})
	registered := time.Now()
	b.waitJS(t, "the newcomer ramping, alone in the latest set, the rollout in progress", fmt.Sprintf(
		`%s === "new-0 latest ramp 8s" && parseInt(%s) < 100 && %s.includes(": 1 of 3 instances; 1 in rotation (0 at full weight, 1 ramping), 0 not eligible; in progress.") && %s === "old-0"`,
		cell("new-0", "instance"), cell("new-0", "weight-cell"), rollout, cell("old-0", "instance")), 5*time.Second)
	b.screenshot(t, "service-ramping.png")
	first := atoi(t, strings.Fields(eval[string](t, b, cell("new-0", "weight-cell")))[0])
	b.waitJS(t, "the newcomer's weight rises", fmt.Sprintf(`parseInt(%s) > %d`, cell("new-0", "weight-cell"), first), ramp)
	b.waitJS(t, "the rollout complete, the newcomer at full weight and no longer tagged", fmt.Sprintf(
		`%s === "100 / 100" && %s === "new-0" && %s.includes(": 1 of 3 instances; 1 in rotation (1 at full weight, 0 ramping), 0 not eligible; complete.")`,
		cell("new-0", "weight-cell"), cell("new-0", "instance"), rollout), ramp+10*time.Second)
	t.Logf("rollout complete on the page %s after the registration (ramp %s)", time.Since(registered).Round(time.Millisecond), ramp)
	if !eval[bool](t, b, `window.cairnTestMarker === true`) {
		t.Error("the page reloaded to follow the rollout")
	}
	// The page says what GET .../rollout says.
	ro, err := n.Client().Rollout(ctx, healthNS, svc)
	if err != nil {
		t.Fatal(err)
	}
	started, err := time.Parse(time.RFC3339Nano, eval[string](t, b, `document.getElementById('rollout').dataset.started`))
	if err != nil || !started.Equal(ro.StartedAt) {
		t.Errorf("the page's rollout started at %s (%v), the API's at %s", started, err, ro.StartedAt)
	}
	if s := ro.Summary; s.Latest != 1 || !s.Complete || ro.Instances[0].InstanceID != "new-0" {
		t.Errorf("GET .../rollout: %+v, first %s; want new-0 alone in the latest set, complete", s, ro.Instances[0].InstanceID)
	}
}
