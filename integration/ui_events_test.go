package integration

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// TestUIEventsTimeline drives the service page's evidence and the events
// page of a real server in headless Chromium: the service page shows
// each endpoint's probe evidence with its observer; one click on an
// instance's "events" link opens its audit trail; closing its backend
// withdraws it, and the withdrawal shows there without a reload, with
// its reason and the probe evidence (class and observer) it was decided
// on; the kind filter is kept in the URL. Any JavaScript error fails the
// test.
func TestUIEventsTimeline(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc = "uievents"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}", "{lease_ttl: 10m}"))
	// Four instances, so that withdrawing one leaves the guard's
	// minimum healthy fraction met.
	bes, ids := loopbackFleet(ctx, t, c, svc, "ev", 4, nil)
	id := ids[0]
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)

	b := newBrowser(t, ctx)
	start := time.Now()
	q := url.Values{"ns": {healthNS}, "svc": {svc}}
	row := fmt.Sprintf(`tr[data-instance="%s"]`, id)
	probe := fmt.Sprintf(`%s td.evidence .ev-group[data-class="probe"] .ev[data-observer="%s"]`, row, n.ID)
	b.do(t, "open the service page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui/service.html?"+q.Encode()),
		chromedp.WaitVisible(probe))
	if got := eval[string](t, b, `document.querySelector('`+probe+`').textContent`); !strings.HasPrefix(got, "✓ "+n.ID+" ") || !strings.HasSuffix(got, "s") {
		t.Errorf("probe evidence of %s by %s: %q, want ✓, the observer and an age", id, n.ID, got)
	}
	b.screenshot(t, "service-evidence.png")

	// One click from the instance's row to its audit trail: its first
	// verdict is there.
	b.do(t, "open the instance's events", 10*time.Second, chromedp.Click(row+" td.events a"),
		chromedp.WaitVisible(`#events tr[data-kind="eligibility"]`))
	q.Set("instance", id)
	query := func() url.Values {
		v, err := url.ParseQuery(strings.TrimPrefix(eval[string](t, b, `location.search`), "?"))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := query(); !maps.EqualFunc(got, q, slices.Equal) {
		t.Errorf("events page query %v, want %v", got, q)
	}
	if got := eval[string](t, b, `document.getElementById("instance-filter").value`); got != id {
		t.Errorf("instance filter %q, want %s", got, id)
	}
	if k := eval[int](t, b, `[...document.querySelectorAll('#events tbody tr')].filter(r => r.dataset.instance !== "`+id+`").length`); k != 0 {
		t.Errorf("%d rows of other instances or of the service with the instance filter on", k)
	}

	// Close the backend: the withdrawal shows without a reload.
	eval[bool](t, b, `window.cairnTestMarker = true`)
	bes[0].Close()
	w := waitEvent(ctx, t, n, svc, 0, "withdrawal", withdrawal(id))
	t.Logf("withdrawal in the API: %s", strings.TrimSpace(eventLines([]wire.Event{w})))
	wrow := fmt.Sprintf(`#events tr[data-seq="%d"]`, w.Seq)
	b.waitJS(t, "the withdrawal shows on the events page", `!!document.querySelector('`+wrow+`')`, 5*time.Second)
	text := func(cell string) string {
		return eval[string](t, b, `document.querySelector('`+wrow+` `+cell+`')?.textContent ?? "<none>"`)
	}
	if got := text("td.reason"); !strings.Contains(got, "probe failing") || got != w.Reason {
		t.Errorf("reason cell %q; want the API's %q, with probe failing", got, w.Reason)
	}
	if got, want := text("td.change"), w.From+" → "+w.To; got != want || !strings.HasPrefix(got, "eligible/") {
		t.Errorf("transition cell %q, want %q from eligible", got, want)
	}
	if got := text("td.evidence .ev-class"); got != "probe" {
		t.Errorf("evidence class %q, want probe", got)
	}
	if got := text("td.evidence .ev-observer"); got != n.ID {
		t.Errorf("evidence observer %q, want the node %s", got, n.ID)
	}
	if got := text("td.actor"); got != w.Actor {
		t.Errorf("actor cell %q, want %q", got, w.Actor)
	}
	if !eval[bool](t, b, `window.cairnTestMarker === true`) {
		t.Error("the page reloaded to show the withdrawal")
	}
	if got := eval[int](t, b, `Number(document.querySelector('#events tbody tr').dataset.seq)`); got != int(w.Seq) {
		t.Errorf("first row is event #%d, want the newest, #%d (the withdrawal)", got, w.Seq)
	}

	// The kind filter: chosen on the page, kept in the URL.
	eval[bool](t, b, `(() => { const s = document.getElementById("kind-filter"); s.value = "registered"; s.dispatchEvent(new Event("change")); return true })()`)
	q.Set("kind", "registered")
	if got := query(); !maps.EqualFunc(got, q, slices.Equal) {
		t.Errorf("after choosing kind registered, query %v, want %v", got, q)
	}
	if got := eval[string](t, b, `[...document.querySelectorAll('#events tbody tr')].map(r => r.dataset.kind).join(",")`); got != "registered" {
		t.Errorf("rows of kind registered for %s: %q, want one", id, got)
	}
	// And read from the URL.
	q.Set("kind", "eligibility")
	b.do(t, "open the eligibility transitions", 10*time.Second, chromedp.Navigate(n.URL()+"/ui/events.html?"+q.Encode()),
		chromedp.WaitVisible(wrow))
	kinds := eval[[]string](t, b, `[...document.querySelectorAll('#events tbody tr')].map(r => r.dataset.kind)`)
	changes := eval[[]string](t, b, `[...document.querySelectorAll('#events tbody tr td.change')].map(c => c.textContent)`)
	if len(kinds) < 2 || slices.ContainsFunc(kinds, func(k string) bool { return k != "eligibility" }) ||
		len(changes) != len(kinds) || !strings.HasPrefix(changes[len(changes)-1], "new → ") || changes[0] != w.From+" → "+w.To {
		t.Errorf("eligibility rows: kinds %q, transitions %q; want the withdrawal first, the first verdict (from new) last", kinds, changes)
	}
	b.screenshot(t, "events.png")
	t.Logf("browser part: %s", time.Since(start).Round(time.Millisecond))
}
