package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// TestUIServiceHistory is issue 33's item 5: the service page's chart
// draws the eligible instances per zone over the node's history, with
// the withdrawal a drain made as a mark, and its "as of" control shows
// the replayed view: before the drain the drained instance in rotation,
// after it out, draining. Any JavaScript error fails the test.
func TestUIServiceHistory(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, append(healthArgs, "--region", "r1", "--zone", "z1")...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc = "uihist"
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, drain_window: 1h, slow_start: 0s, max_unavailable: 2}"))
	incs := map[string]uint64{}
	for i, zone := range []string{"z1", "z2", "z2"} {
		id := fmt.Sprintf("h-%d", i)
		r := registerLoopback(ctx, t, c, svc, id, 8080, func(r *wire.Registration) {
			r.Addresses, r.Region, r.Zone = []string{fmt.Sprintf("127.0.0.%d", 91+i)}, "r1", zone
		})
		incs[id] = r.Incarnation
	}
	eligible := func(want map[string]bool) {
		t.Helper()
		Eventually(t, 20*time.Second, func() error {
			es, err := endpointsOn(ctx, n, svc)
			if err != nil {
				return err
			}
			for id, w := range want {
				if e, ok := es[id]; !ok || e.Eligible != w {
					return fmt.Errorf("%s eligible %v, want %v", id, ok && e.Eligible, w)
				}
			}
			return nil
		})
	}
	eligible(map[string]bool{"h-0": true, "h-1": true, "h-2": true})
	// The page's time control has whole seconds: replay the second after
	// all three were in rotation, and drain after it.
	asOf := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(asOf.Add(100 * time.Millisecond)))
	onAnyNode(t, c, "drain", func(x *Node) error {
		_, err := x.Client().Drain(ctx, wire.InstanceKey{Namespace: healthNS, Service: svc, ID: "h-2"}, incs["h-2"])
		return err
	})
	eligible(map[string]bool{"h-2": false})
	drained := time.Now()

	b := newBrowser(t, ctx)
	b.do(t, "open the service page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/service.html?ns="+healthNS+"&svc="+svc),
		chromedp.WaitVisible(`tr[data-instance="h-2"]`))
	b.waitJS(t, "the chart: z1 at 1, z2 down to 1, and the drain's withdrawal marked",
		`document.querySelector('#chart path[data-zone="z1"]')?.dataset.last === "1" && `+
			`document.querySelector('#chart path[data-zone="z2"]')?.dataset.last === "1" && `+
			`document.querySelectorAll('#chart text.mark[data-kind="withdrawal"]').length === 1`, 20*time.Second)

	// datetime-local takes local time.
	setAsOf := func(at time.Time) {
		t.Helper()
		eval[bool](t, b, fmt.Sprintf(`(() => { const ms = %d; const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
			document.getElementById('asof').value = d.toISOString().slice(0, 19);
			document.getElementById('asof-form').requestSubmit(); return true; })()`, at.UnixMilli()))
	}
	cell := func(id, class string) string {
		return fmt.Sprintf(`document.querySelector('#replay-endpoints tr[data-instance="%s"] td.%s')?.textContent`, id, class)
	}
	setAsOf(asOf)
	b.waitJS(t, "as of the second before the drain: h-2 ready and in rotation, A answered with z1's h-0",
		fmt.Sprintf(`%s === "yes" && %s === "ready" && %s === "yes" && `+
			`document.querySelector('#replay-dns tr[data-type="A"] td.answer')?.textContent.includes("127.0.0.91") && `+
			`document.getElementById('replay-summary').textContent.startsWith("AS OF")`,
			cell("h-2", "eligible"), cell("h-2", "lifecycle"), cell("h-0", "eligible")), 15*time.Second)
	setAsOf(drained.Add(time.Second)) // whole seconds: the one after the drain was served
	b.waitJS(t, "after the drain: h-2 draining and out",
		fmt.Sprintf(`%s === "no" && %s === "draining"`, cell("h-2", "eligible"), cell("h-2", "lifecycle")), 15*time.Second)
	b.screenshot(t, "service-history.png")
}
