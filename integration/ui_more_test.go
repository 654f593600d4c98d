package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// More dashboard tests, on the helpers of ui_test.go: the guard flag
// shown live, a scoped reader, the time to render a large services page,
// and the cluster page.

// TestUIGuardFlagLive: with the services page open in one tab and the
// service page in another, three of four instances' listeners closing
// puts the service below min_healthy_fraction (0.5), and both pages show
// health disregarded without a reload.
func TestUIGuardFlagLive(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc = "uiguard"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		"{min_healthy_fraction: 0.5, admit_after: 4, admit_min: 3s, lease_ttl: 10m}"))
	bs, ids := loopbackFleet(ctx, t, c, svc, "ug", 4, func(r *wire.Registration) { r.Region, r.Zone = "r-1", "z-a" })
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)

	list, page := newBrowser(t, ctx), newBrowser(t, ctx)
	row := fmt.Sprintf(`tr[data-service="%s/%s"]`, healthNS, svc)
	list.do(t, "open the services page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/"), chromedp.WaitVisible(row))
	list.waitJS(t, "4 of 4 eligible, no flag", fmt.Sprintf(`document.querySelector('%s td.eligible')?.textContent === "4" && !document.querySelector('%s').classList.contains('disregarded') && document.getElementById('disregarded').hidden`, row, row), 10*time.Second)
	page.do(t, "open the service page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/service.html?ns="+healthNS+"&svc="+svc),
		chromedp.WaitVisible(`tr[data-instance="ug-3"]`))
	if !eval[bool](t, page, `document.getElementById('disregarded').hidden`) {
		t.Fatal("the service page shows health disregarded before any listener closed")
	}
	for _, b := range []*browser{list, page} {
		eval[bool](t, b, `window.cairnTestMarker = true`)
	}

	closed := time.Now()
	for _, b := range bs[:3] {
		b.Close()
	}
	list.waitJS(t, "the services page flags the service and shows the banner", fmt.Sprintf(
		`document.querySelector('%s')?.classList.contains('disregarded') && document.querySelector('%s .flag.loud')?.textContent === "health_disregarded" && !document.getElementById('disregarded').hidden && document.getElementById('disregarded').textContent.includes('%s/%s')`,
		row, row, healthNS, svc), 30*time.Second)
	t.Logf("services page: health disregarded shown %s after 3 of 4 listeners closed", time.Since(closed).Round(time.Millisecond))
	page.waitJS(t, "the service page shows the banner and flags the failing instances",
		`!document.getElementById('disregarded').hidden && [0,1,2].every(i => document.querySelector('tr[data-instance="ug-'+i+'"] td.flags-cell')?.textContent.includes('health_disregarded')) && document.querySelector('tr[data-instance="ug-0"] td.eligible')?.textContent === "yes"`,
		10*time.Second)
	t.Logf("service page: banner shown %s after the listeners closed", time.Since(closed).Round(time.Millisecond))
	for name, b := range map[string]*browser{"services": list, "service": page} {
		if !eval[bool](t, b, `window.cairnTestMarker === true`) {
			t.Errorf("the %s page reloaded to show the guard", name)
		}
	}
	list.screenshot(t, "services-guard.png")
	page.screenshot(t, "service-guard.png")
}

// TestUIScopedReader: a reader token scoped to one namespace sees that
// namespace's services on the services page and nothing of another; the
// service page of the other namespace shows the token prompt with the
// refusal, not the service.
func TestUIScopedReader(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	const otherNS, otherSvc, otherID = "billing", "ledger", "secret-ledger-0"
	c, _, reader := startACLNode(t)
	n := c.Nodes[0]
	ctx := ctxT(t, time.Minute)
	applyDefinition(ctx, t, c, healthService("visible", "", "{lease_ttl: 10m}")+"---\n"+
		strings.Replace(healthService(otherSvc, "", "{lease_ttl: 10m}"), "namespace: "+healthNS, "namespace: "+otherNS, 1))
	registerLoopback(ctx, t, c, "visible", "vis-0", 8080, nil)
	onAnyNode(t, c, "register "+otherID, func(n *Node) error {
		_, err := n.Client().Register(ctx, otherNS, otherSvc, wire.Registration{ID: otherID, Addresses: []string{"127.0.0.1"}, Ports: map[string]int{"http": 8080}})
		return err
	})

	b := newBrowser(t, ctx)
	b.do(t, "open the services page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/"), chromedp.WaitVisible("#token-form"))
	b.do(t, "enter the reader token", 5*time.Second, chromedp.SendKeys("#token-input", reader),
		chromedp.Click(`#token-form button[type="submit"]`))
	b.waitJS(t, "the reader sees its namespace's service", fmt.Sprintf(`document.querySelector('tr[data-service="%s/visible"] td.instances')?.textContent === "1"`, healthNS), 10*time.Second)
	if got := eval[[]string](t, b, `[...document.querySelectorAll('#services tbody tr')].map(r => r.dataset.service)`); !slices.Equal(got, []string{healthNS + "/visible"}) {
		t.Errorf("services page rows %q; want only %s/visible", got, healthNS)
	}
	if got := eval[[]string](t, b, `[...document.getElementById('ns-filter').options].map(o => o.value)`); slices.Contains(got, otherNS) {
		t.Errorf("namespace filter offers %q to a reader of %s", got, healthNS)
	}
	if got := eval[string](t, b, `document.body.innerText`); strings.Contains(got, otherNS) || strings.Contains(got, otherSvc) {
		t.Errorf("the services page shows something of %s to a reader of %s:\n%s", otherNS, healthNS, got)
	}
	b.screenshot(t, "services-reader.png")

	// The other namespace's service page: refused, the prompt says so.
	b.do(t, "open the other namespace's service page", 15*time.Second,
		chromedp.Navigate(n.URL()+"/ui/service.html?ns="+otherNS+"&svc="+otherSvc), chromedp.WaitVisible("#token-form"))
	b.waitJS(t, "the prompt says the token was refused", `document.getElementById('token-message').textContent.startsWith('The API refused this token')`, 5*time.Second)
	if got := eval[int](t, b, `document.querySelectorAll('#endpoints tbody tr').length`); got != 0 {
		t.Errorf("the refused service page lists %d endpoints", got)
	}
	if got := eval[string](t, b, `document.body.innerText`); strings.Contains(got, otherID) || strings.Contains(got, "127.0.0.1") {
		t.Errorf("the refused service page shows the service's data:\n%s", got)
	}
	b.screenshot(t, "service-refused.png")
}

// UI render sizes: the page of 1,000 services and 8,000
// instances, in namespaces of 100 services.
const (
	renderServices   = 1000
	renderPerService = 8
	renderPerNS      = 100
	renderWorkers    = 16 // concurrent registrations
)

// TestUIRenderLarge measures, in the browser, the time from navigation
// start until the services table shows all 1,000 rows of a server holding
// 1,000 services and 8,000 instances. The figure is logged, never
// asserted: "UI render: 1000 services in N ms".
func TestUIRenderLarge(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, "--allow-loopback-endpoints")
	n := c.Nodes[0]
	ctx := ctxT(t, 3*time.Minute)
	svcName := func(i int) (ns, name string) {
		return fmt.Sprintf("ns%02d", i/renderPerNS), fmt.Sprintf("svc-%04d", i)
	}
	setup := time.Now()
	var batch strings.Builder
	for i := range renderServices {
		ns, name := svcName(i)
		fmt.Fprintf(&batch, "---\nnamespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\npolicy: {lease_ttl: 1h}\n", ns, name)
		if (i+1)%renderPerNS == 0 {
			applyDefinition(ctx, t, c, batch.String())
			batch.Reset()
		}
	}
	applied := time.Since(setup)

	type job struct{ svc, inst int }
	jobs := make(chan job)
	errs := make(chan error, renderWorkers)
	var wg sync.WaitGroup
	for range renderWorkers {
		wg.Go(func() {
			for j := range jobs {
				ns, name := svcName(j.svc)
				k := j.svc*renderPerService + j.inst
				reg := wire.Registration{ID: fmt.Sprintf("i-%d", j.inst), Ports: map[string]int{"http": 8080},
					Addresses: []string{fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255)}}
				if _, err := n.Client().Register(ctx, ns, name, reg); err != nil {
					errs <- fmt.Errorf("register %s/%s/%s: %w", ns, name, reg.ID, err)
					return
				}
			}
		})
	}
	func() {
		defer close(jobs)
		for i := range renderServices {
			for k := range renderPerService {
				select {
				case jobs <- job{i, k}:
				case err := <-errs:
					t.Error(err)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("set up %d services (%s) and %d instances (%s, %d at a time)", renderServices, applied.Round(time.Millisecond),
		renderServices*renderPerService, (time.Since(setup) - applied).Round(time.Millisecond), renderWorkers)
	ss, err := n.Client().Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range ss {
		total += s.Instances
	}
	if len(ss) != renderServices || total != renderServices*renderPerService {
		t.Fatalf("the API lists %d services, %d instances", len(ss), total)
	}

	b := newBrowser(t, ctx)
	// Warm the browser (process, HTTP cache of the static files revalidated
	// anyway) on another page, so the figure is the services page's.
	b.do(t, "open the favicon", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/favicon.svg"))
	rows := fmt.Sprintf(`document.querySelectorAll('#services tbody tr').length === %d`, renderServices)
	pctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	// Navigate returns at the load event, which may come after the table
	// is full: the page's own mark says when render() finished; the poll
	// (every 5ms, in the page) says when a check first saw every row.
	_, err = chromedp.Run(pctx, chromedp.Navigate(n.URL()+"/ui/"))
	var shown float64
	if err == nil {
		shown, err = chromedp.Run(pctx, chromedp.Poll[float64](rows+` && performance.now()`, chromedp.WithPollingInterval(5*time.Millisecond)))
	}
	if err != nil {
		t.Fatalf("the services page with %d rows: %v (JavaScript errors %q)", renderServices, err, b.errors())
	}
	mark := eval[float64](t, b, `performance.getEntriesByName('cairn.services.rendered').at(0)?.startTime ?? -1`)
	if mark < 0 {
		t.Fatal("the services page set no cairn.services.rendered mark")
	}
	t.Logf("UI render: %d services in %.0f ms (navigation start to render() done; %d instances; a poll saw every row at %.0f ms)",
		renderServices, mark, renderServices*renderPerService, shown)
	if got := eval[string](t, b, `document.getElementById('summary').textContent`); !strings.HasPrefix(got, fmt.Sprintf("%d services, %d instances", renderServices, renderServices*renderPerService)) {
		t.Errorf("summary %q", got)
	}
	// The namespace filter, on the same data.
	filterAt := eval[float64](t, b, `performance.now()`)
	b.do(t, "filter one namespace", 10*time.Second, chromedp.SetValue("#ns-filter", "ns03"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('ns-filter').dispatchEvent(new Event('change'))`))
	b.waitJS(t, "the filter shows one namespace", fmt.Sprintf(`document.querySelectorAll('#services tbody tr').length === %d`, renderPerNS), 10*time.Second)
	t.Logf("filter to %d services: %.0f ms", renderPerNS, eval[float64](t, b, `performance.now()`)-filterAt)
	b.screenshot(t, "services-1000.png")
}

// TestUIClusterPage: the cluster page of a follower of a 3-node cluster
// lists the members as GET /v1/members does, with the leader marked, and
// the node's raft state and revision; reached from the services page's
// nav. When the leader is killed, the page shows the new leader without
// a reload.
func TestUIClusterPage(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 3)
	ctx := ctxT(t, 2*time.Minute)
	leader, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, ctx)
	b.do(t, "open the services page", 15*time.Second, chromedp.Navigate(follower.URL()+"/ui/"), chromedp.WaitVisible("#empty"))
	b.do(t, "follow the Cluster link", 15*time.Second, chromedp.Click(`nav a[href="cluster.html"]`),
		chromedp.WaitVisible(`#members tbody tr[data-node]`))
	b.waitJS(t, "three members, the leader marked", fmt.Sprintf(
		`document.querySelectorAll('#members tbody tr').length === 3 && document.querySelector('tr[data-node="%s"] td.role')?.textContent === "leader"`, leader.ID), 10*time.Second)
	ms, err := follower.Client().Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		row := fmt.Sprintf(`document.querySelector('tr[data-node="%s"] td.%%s')?.textContent`, m.NodeID)
		role := map[bool]string{true: "leader", false: "follower"}[m.Leader]
		for class, want := range map[string]string{"role": role, "http-addr": m.HTTPAddr, "raft-addr": m.RaftAddr,
			"voter": map[bool]string{true: "yes", false: "no"}[m.Voter]} {
			if got := eval[string](t, b, fmt.Sprintf(row, class)); got != want {
				t.Errorf("member %s: %s cell %q, API %q", m.NodeID, class, got, want)
			}
		}
	}
	st, err := follower.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"st-node": follower.ID, "st-state": st.State, "st-leader": leader.ID, "st-caught-up": "yes"} {
		if got := eval[string](t, b, `document.getElementById('`+id+`').textContent`); got != want {
			t.Errorf("#%s %q, want %q", id, got, want)
		}
	}
	if got := eval[string](t, b, `document.getElementById('st-revision').textContent`); got == "" || got == "0" {
		t.Errorf("revision %q", got)
	}
	if !eval[bool](t, b, `document.getElementById('no-leader').hidden && document.getElementById('behind').hidden`) {
		t.Error("a banner shows on a healthy cluster")
	}
	b.screenshot(t, "cluster.png")

	// The leader dies: another is elected, and the page says so live.
	eval[bool](t, b, `window.cairnTestMarker = true`)
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	b.waitJS(t, "another leader shown", fmt.Sprintf(
		`(l => l !== "" && l !== "unknown" && l !== "%s")(document.getElementById('st-leader').textContent) && document.querySelector('tr[data-node="%s"] td.role')?.textContent === "follower"`,
		leader.ID, leader.ID), 30*time.Second)
	t.Logf("new leader %s shown %s after the leader was killed", eval[string](t, b, `document.getElementById('st-leader').textContent`),
		time.Since(killed).Round(time.Millisecond))
	if !eval[bool](t, b, `window.cairnTestMarker === true`) {
		t.Error("the cluster page reloaded to show the new leader")
	}
}
