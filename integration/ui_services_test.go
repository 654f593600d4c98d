package integration

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/miekg/dns"

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

// TestUIStaleWithoutLeader: the dashboard says loudly that what it shows
// may be stale by the rule the node's DNS answers follow (issue 14 item
// 2, SPEC §1 and §3). A follower whose two peers are killed keeps
// answering from what it has; once its view is older than --stale-after,
// GET /v1/status and the service's view say stale with the age, its DNS
// answers carry EDE 3, and the services, service and cluster pages say
// STALE without a reload, although its revision no longer moves. Started
// again alone, it has not caught up with any leader, and the page says
// that instead.
func TestUIStaleWithoutLeader(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	const staleAfter = 3 * time.Second
	c := StartCluster(t, 3, append([]string{"--stale-after", staleAfter.String()}, healthArgs...)...)
	ctx := ctxT(t, 2*time.Minute)
	const svc = "lonely"
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m}"))
	registerLoopback(ctx, t, c, svc, "l-1", 8080, nil)
	leader, err := c.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var f *Node
	for _, n := range c.Nodes {
		if n != leader {
			f = n
			break
		}
	}
	name := svc + "." + healthNS + ".svc.cairn.internal."
	Eventually(t, 20*time.Second, func() error {
		got, _, edes, _, err := staleAnswer(f, name)
		if err != nil || len(got) != 1 || len(edes) != 0 {
			return fmt.Errorf("%s answers %v EDE %v (%v); want one address, fresh", f.ID, got, edes, err)
		}
		return nil
	})

	b := newBrowser(t, ctx)
	row := fmt.Sprintf(`tr[data-service="%s/%s"]`, healthNS, svc)
	b.do(t, "open the follower's services page", 15*time.Second, chromedp.Navigate(f.URL()+"/ui/?ns="+healthNS), chromedp.WaitVisible(row))
	b.waitJS(t, "not stale while the cluster is whole", `document.getElementById('stale').hidden`, 10*time.Second)

	for _, n := range c.Nodes {
		if n != f {
			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	Eventually(t, 20*time.Second, func() error {
		st, err := f.Client().Status(ctx)
		if err != nil {
			return err
		}
		if !st.Stale || st.AgeSeconds <= staleAfter.Seconds() {
			return fmt.Errorf("%s status: stale %v, age %.1f s; want stale past %s", f.ID, st.Stale, st.AgeSeconds, staleAfter)
		}
		d, err := f.Client().Service(ctx, healthNS, svc)
		if err != nil {
			return err
		}
		if !d.View.Stale || d.View.AgeSeconds <= staleAfter.Seconds() {
			return fmt.Errorf("%s view: stale %v, age %.1f s; want stale past %s", f.ID, d.View.Stale, d.View.AgeSeconds, staleAfter)
		}
		// The page and dig agree: the DNS answer is stale too.
		if got, _, edes, _, err := staleAnswer(f, name); err != nil || len(got) != 1 || !slices.Contains(edes, dns.ExtendedErrorCodeStaleAnswer) {
			return fmt.Errorf("%s answers %v EDE %v (%v); want the address, stale (EDE 3)", f.ID, got, edes, err)
		}
		return nil
	})
	stale := `((b) => !b.hidden && b.textContent.startsWith('STALE: node %s\'s view is ') && b.textContent.includes('DNS answers say so (EDE 3') && document.body.classList.contains('stale'))(document.getElementById('stale'))`
	b.waitJS(t, "the services page says stale, with the age", fmt.Sprintf(stale, f.ID), 10*time.Second)
	if got := eval[int](t, b, `document.querySelectorAll('#services tbody tr').length`); got != 1 {
		t.Errorf("stale services page lists %d rows; want the one service still shown", got)
	}
	b.screenshot(t, "services-stale-no-leader.png")

	b.do(t, "open the follower's service page", 15*time.Second,
		chromedp.Navigate(f.URL()+"/ui/service.html?"+url.Values{"ns": {healthNS}, "svc": {svc}}.Encode()),
		chromedp.WaitVisible(`#endpoints tbody tr`))
	b.waitJS(t, "the service page says stale", `((b) => !b.hidden && b.textContent.startsWith('STALE') && b.textContent.includes(' old'))(document.getElementById('stale'))`, 10*time.Second)
	b.do(t, "open the follower's cluster page", 15*time.Second, chromedp.Navigate(f.URL()+"/ui/cluster.html"), chromedp.WaitVisible(`#st-node`))
	b.waitJS(t, "the cluster page says stale", `document.getElementById('st-freshness').textContent.startsWith('STALE: its view is ')`, 10*time.Second)

	// Started again alone: never caught up since it started.
	if err := f.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := f.Respawn(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 20*time.Second, func() error {
		st, err := f.Client().Status(ctx)
		if err == nil && st.CaughtUp {
			t.Fatalf("%s restarted alone says it is caught up", f.ID)
		}
		return err
	})
	// (Its replica may hold nothing yet: raft applies the log it kept
	// only once a leader says what is committed.)
	b.do(t, "open the restarted follower's services page", 15*time.Second, chromedp.Navigate(f.URL()+"/ui/?ns="+healthNS), chromedp.WaitVisible(`#view-revision`))
	b.waitJS(t, "the page says the node has not caught up", fmt.Sprintf(
		`((b) => !b.hidden && b.textContent.startsWith('STALE: node %s is not caught up'))(document.getElementById('stale'))`, f.ID), 20*time.Second)
}
