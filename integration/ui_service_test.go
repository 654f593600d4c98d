package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// TestUIServiceFollowsTheTable: the service page shows what the node's
// status table serves (issue 26 item 7): through slow start the weights
// rise on the page at every table, with no write to the store and no
// reload; each endpoint's tier is relative to the node's place and the
// evaluator's verdict stands beside it; and at the table version the
// page names, its weights are those of `cairn -o json endpoints`. Any
// JavaScript error fails the test.
func TestUIServiceFollowsTheTable(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, append(healthArgs, "--region", "r1", "--zone", "z1")...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc = "uislow"
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, drain_window: 1h, slow_start: 60s}"))
	for i, zone := range []string{"z1", "z2"} {
		registerLoopback(ctx, t, c, svc, fmt.Sprintf("s-%d", i), 8080, func(r *wire.Registration) {
			r.Addresses, r.Region, r.Zone = []string{fmt.Sprintf("127.0.0.%d", 81+i)}, "r1", zone
		})
	}
	b := newBrowser(t, ctx)
	b.do(t, "open the service page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/service.html?ns="+healthNS+"&svc="+svc),
		chromedp.WaitVisible(`tr[data-instance="s-1"]`))
	cell := func(id, class string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-instance="%s"] td.%s')?.textContent`, id, class)
	}
	b.waitJS(t, "both eligible in slow start, tiers 0 and 1, the evaluator's verdict beside", fmt.Sprintf(
		`%s === "yes" && %s === "yes" && %s === "0" && %s === "1" && %s === "unknown, eligible" && /^\d+ \/ 100$/.test(%s) && parseInt(%s) < 100`,
		cell("s-0", "eligible"), cell("s-1", "eligible"), cell("s-0", "tier"), cell("s-1", "tier"), cell("s-0", "evaluator"),
		cell("s-0", "weight-cell"), cell("s-0", "weight-cell")), 15*time.Second)
	eval[bool](t, b, `window.cairnTestMarker = true`)
	first := eval[string](t, b, cell("s-0", "weight-cell"))
	b.waitJS(t, "the weight rises without a write or a reload", fmt.Sprintf(`parseInt(%s) > %d`, cell("s-0", "weight-cell"),
		atoi(t, strings.Fields(first)[0])), 10*time.Second)
	if !eval[bool](t, b, `window.cairnTestMarker === true`) {
		t.Error("the page reloaded to show the new weight")
	}

	// The page's weights are the CLI's at the table the page names.
	Eventually(t, 15*time.Second, func() error {
		summary := eval[string](t, b, `document.getElementById('summary').textContent`)
		page := map[string]int{}
		for _, id := range []string{"s-0", "s-1"} {
			page[id] = atoi(t, strings.Fields(eval[string](t, b, cell(id, "weight-cell")))[0])
		}
		eps, err := endpointsOn(ctx, n, svc)
		if err != nil {
			return err
		}
		var version uint64
		cli := map[string]int{}
		for id, e := range eps {
			version = e.TableVersion
			cli[id] = e.Weight
		}
		if !strings.Contains(summary, fmt.Sprintf("served from status table %d ", version)) {
			return fmt.Errorf("the page shows %q, the CLI read table %d: not the same table yet", summary, version)
		}
		if fmt.Sprint(page) != fmt.Sprint(cli) {
			return &stopPolling{fmt.Errorf("at table %d the page shows weights %v and the CLI %v", version, page, cli)}
		}
		return nil
	})
	b.screenshot(t, "service-slow-start.png")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a number: %v", s, err)
	}
	return n
}
