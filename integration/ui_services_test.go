package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// TestUIServicesZonesSortStale drives the services page (issue 14 item
// 2): with instances in two zones, one drained, each row's per-zone
// counts are the API's; a header click sorts the rows and keeps the order
// in the URL, a second click reverses it; the page shows the node's
// revision and, once the node is gone, says loudly that it is stale. Any
// JavaScript error fails the test.
func TestUIServicesZonesSortStale(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, time.Minute)
	const alpha, beta, gamma = "zs-alpha", "zs-beta", "zs-gamma"
	for _, svc := range []string{alpha, beta, gamma} {
		applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, slow_start: 0s}"))
	}
	// alpha: 2 in zone a (one drained), 1 in zone b; beta: 1 in zone b;
	// gamma: none.
	regs := map[string]wire.Registered{}
	for i, r := range []struct{ svc, id, zone string }{{alpha, "a-1", "a"}, {alpha, "a-2", "a"}, {alpha, "b-1", "b"}, {beta, "b-2", "b"}} {
		regs[r.id] = registerLoopback(ctx, t, c, r.svc, r.id, 8080, func(reg *wire.Registration) {
			reg.Addresses, reg.Region, reg.Zone = []string{fmt.Sprintf("127.0.0.%d", 71+i)}, "r-1", r.zone
		})
	}
	if _, err := n.Client().Drain(ctx, wire.InstanceKey{Namespace: healthNS, Service: alpha, ID: "a-2"}, regs["a-2"].Incarnation); err != nil {
		t.Fatal(err)
	}
	// The API's per-zone counts, once they settle where the test set them.
	want := map[string]string{alpha: "a 1/2 · b 1/1", beta: "b 1/1", gamma: "-"}
	zoneText := func(s wire.ServiceSummary) string {
		var parts []string
		for _, z := range s.Zones {
			parts = append(parts, fmt.Sprintf("%s %d/%d", z.Zone, z.Eligible, z.Instances))
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, " · ")
	}
	var api map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ss, err := n.Client().Services(ctx)
		if err != nil {
			t.Fatal(err)
		}
		api = map[string]string{}
		for _, s := range ss {
			api[s.Name] = zoneText(s)
		}
		if fmt.Sprint(api) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API's per-zone counts are %v; want %v", api, want)
		}
	}

	b := newBrowser(t, ctx)
	b.do(t, "open the services page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/?ns="+healthNS),
		chromedp.WaitVisible(fmt.Sprintf(`tr[data-service="%s/%s"]`, healthNS, gamma)))
	zones := func(svc string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-service="%s/%s"] td.zones')?.textContent`, healthNS, svc)
	}
	b.waitJS(t, "the per-zone counts are the API's", fmt.Sprintf(`%s === %q && %s === %q && %s === %q`,
		zones(alpha), api[alpha], zones(beta), api[beta], zones(gamma), api[gamma]), 5*time.Second)
	if got := eval[bool](t, b, fmt.Sprintf(`document.querySelector('tr[data-service="%s/%s"] span.zone[data-zone="a"]').classList.contains('short')`, healthNS, alpha)); !got {
		t.Error("zone a of alpha, 1 of 2 eligible, is not marked short")
	}

	order := `[...document.querySelectorAll('#services tbody tr')].map(r => r.dataset.service.split('/')[1]).join(',')`
	if got := eval[string](t, b, order); got != alpha+","+beta+","+gamma {
		t.Errorf("default order %s; want by name", got)
	}
	// Sort by instances: ascending, then descending; the filter stays.
	b.do(t, "sort by instances", 5*time.Second, chromedp.Click(`th[data-sort="instances"] button`))
	b.waitJS(t, "sorted by instances, ascending", fmt.Sprintf(`%s === %q`, order, gamma+","+beta+","+alpha), 3*time.Second)
	if got := eval[string](t, b, `location.search`); got != "?ns="+healthNS+"&sort=instances" {
		t.Errorf("URL query %q after sorting by instances", got)
	}
	if got := eval[string](t, b, `document.querySelector('th[data-sort="instances"]').getAttribute('aria-sort')`); got != "ascending" {
		t.Errorf("instances header aria-sort %q", got)
	}
	b.do(t, "sort by instances again", 5*time.Second, chromedp.Click(`th[data-sort="instances"] button`))
	b.waitJS(t, "sorted by instances, descending", fmt.Sprintf(`%s === %q`, order, alpha+","+beta+","+gamma), 3*time.Second)
	if got := eval[string](t, b, `location.search`); got != "?ns="+healthNS+"&sort=-instances" {
		t.Errorf("URL query %q after sorting by instances twice", got)
	}
	// The sort survives a reload, from the URL.
	b.do(t, "reload", 10*time.Second, chromedp.Reload(), chromedp.WaitVisible(fmt.Sprintf(`tr[data-service="%s/%s"]`, healthNS, gamma)))
	b.waitJS(t, "still descending after a reload", fmt.Sprintf(`%s === %q`, order, alpha+","+beta+","+gamma), 3*time.Second)

	// The node's revision, and staleness.
	st, err := n.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, "the page shows the node's revision, not stale", fmt.Sprintf(
		`((m) => m !== null && Number(m[1]) >= %d)(/^revision (\d+), /.exec(document.getElementById('view-revision').textContent)) && document.getElementById('stale').hidden`, st.Revision), 3*time.Second)
	b.screenshot(t, "services-zones.png")
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, "the page says it is stale once the node is gone", `!document.getElementById('stale').hidden && document.getElementById('stale').textContent.startsWith('STALE') && document.body.classList.contains('stale')`, 5*time.Second)
	b.screenshot(t, "services-stale.png")
}
