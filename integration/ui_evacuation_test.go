package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// evacSample is what the service page shows of an evacuated zone at one
// moment: the zone, weight and tier cells of one of its instances, and
// the states the evacuations section lists.
type evacSample struct {
	Zone   string `json:"zone"`
	Weight string `json:"weight"`
	Tier   string `json:"tier"`
	States string `json:"states"`
}

// evacSampler records, in the page, every change of what it shows of
// instance id's zone (polled every 20ms, so that a step of the return
// shown for less than a poll of the test is still seen): an array of
// evacSample in window.cairnEvacSamples; window.cairnEvacSample() takes
// one sample at once.
const evacSampler = `(() => {
  const row = 'tr[data-instance="%s"]';
  window.cairnEvacSamples = [];
  let last = '';
  window.cairnEvacSample = () => {
    const s = {
      zone: document.querySelector(row + ' td.zone')?.textContent ?? '',
      weight: document.querySelector(row + ' td.weight-cell')?.textContent ?? '',
      tier: document.querySelector(row + ' td.tier')?.textContent ?? '',
      states: document.getElementById('evacuations').hidden ? '' :
        [...document.querySelectorAll('#evacuations-list tbody tr')].map((r) => r.dataset.state).join(','),
    };
    const k = JSON.stringify(s);
    if (k !== last) { window.cairnEvacSamples.push(s); last = k; }
    return true;
  };
  setInterval(window.cairnEvacSample, 20);
  return true;
})()`

// TestUIEvacuation: the dashboard shows an evacuation and the return
// after it (issue 30): a service in zones a and b on a node in zone b;
// `cairn evacuate --zone a` shows on the service page without a reload,
// zone a's instances "a (evacuated)" in tier 3, the evacuation listed
// with who and why, and on the cluster page; `--undo` with shift_back
// 10s shows zone a "returning" with a share that rises in steps, then
// neither once the zone is back; and the service's events page shows
// the evacuation's start, end and return, though it was of every
// service. Any JavaScript error fails the test.
func TestUIEvacuation(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 1, append(slices.Clone(healthArgs), "--region", "r1", "--zone", "b")...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc = "uievac"
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, drain_window: 1h, slow_start: 0s, shift_back: 10s, max_unavailable: 50%}"))
	zoneOf := map[string]string{}
	for i, zone := range []string{"a", "a", "b", "b"} {
		id := fmt.Sprintf("ev-%s%d", zone, i%2)
		zoneOf[id] = zone
		registerLoopback(ctx, t, c, svc, id, 8080, func(r *wire.Registration) {
			r.Addresses, r.Region, r.Zone = []string{fmt.Sprintf("127.0.0.%d", 91+i)}, "r1", zone
		})
	}

	b := newBrowser(t, ctx)
	start := time.Now()
	q := url.Values{"ns": {healthNS}, "svc": {svc}}
	page := n.URL() + "/ui/service.html?" + q.Encode()
	b.do(t, "open the service page", 15*time.Second, chromedp.Navigate(page), chromedp.WaitVisible(`tr[data-instance="ev-b1"]`))
	cell := func(id, class string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-instance="%s"] td.%s')?.textContent`, id, class)
	}
	// every is a JavaScript condition that holds of each instance: f
	// gives it for one.
	every := func(f func(id, zone string) string) string {
		var parts []string
		for id, zone := range zoneOf {
			parts = append(parts, "("+f(id, zone)+")")
		}
		return strings.Join(parts, " && ")
	}
	b.waitJS(t, "four instances, zone a in tier 1 and b in tier 0, no evacuation", every(func(id, zone string) string {
		return fmt.Sprintf(`%s === %q && %s === %q`, cell(id, "zone"), zone, cell(id, "tier"), map[string]string{"a": "1", "b": "0"}[zone])
	})+` && document.getElementById('evacuations').hidden`, 10*time.Second)

	// Evacuate zone a: the page shows it without a reload.
	eval[bool](t, b, `window.cairnTestMarker = true`)
	runCLI(ctx, t, n, "evacuate", "--zone", "a", "--reason", "ui test: zone a is flaky")
	evacuated := time.Now()
	b.waitJS(t, "zone a evacuated on its endpoints, in tier 3, and the evacuation listed", every(func(id, zone string) string {
		if zone == "a" {
			return fmt.Sprintf(`%s === "a (evacuated)" && %s === "3"`, cell(id, "zone"), cell(id, "tier"))
		}
		return fmt.Sprintf(`%s === "b" && %s === "0"`, cell(id, "zone"), cell(id, "tier"))
	})+` && !document.getElementById('evacuations').hidden && document.querySelector('#evacuations-list tr[data-state="evacuated"]') !== null`,
		5*time.Second)
	t.Logf("evacuation shown %s after `cairn evacuate` returned", time.Since(evacuated).Round(time.Millisecond))
	if !eval[bool](t, b, `window.cairnTestMarker === true`) {
		t.Error("the page reloaded to show the evacuation")
	}
	es, err := n.Client().Evacuations(ctx)
	if err != nil || len(es) != 1 {
		t.Fatalf("GET /v1/evacuations: %+v, %v; want one", es, err)
	}
	ev := es[0]
	row := fmt.Sprintf(`#evacuations-list tr[data-evacuation="%d"]`, ev.ID)
	text := func(sel string) string {
		return eval[string](t, b, `document.querySelector('`+sel+`')?.textContent ?? "<none>"`)
	}
	for sel, want := range map[string]string{
		row + " td.scope":  "zone a, every service",
		row + " td.state":  "evacuated",
		row + " td.actor":  ev.Actor,
		row + " td.reason": "ui test: zone a is flaky",
	} {
		if got := text(sel); got != want {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if got := text(row + " td.ends"); !strings.HasPrefix(got, "expires in 23 h 5") {
		t.Errorf("the evacuation ends %q, want in about 24h (the default expiry)", got)
	}
	if got := text("#evacuations-summary"); !strings.Contains(got, "EVACUATED: Zone a: its 2 instances go last for every caller") {
		t.Errorf("evacuations banner %q", got)
	}
	if got := text("#summary"); !strings.Contains(got, "4 instances, 4 eligible, 2 in an evacuated zone;") {
		t.Errorf("summary %q: want 4 eligible, 2 of them in an evacuated zone (nothing withdrawn)", got)
	}
	b.screenshot(t, "service-evacuated.png")

	// The cluster page lists it too.
	b.do(t, "open the cluster page", 10*time.Second, chromedp.Navigate(n.URL()+"/ui/cluster.html"),
		chromedp.WaitVisible(fmt.Sprintf(`#cluster-evacuations tr[data-evacuation="%d"]`, ev.ID)))
	crow := fmt.Sprintf(`#cluster-evacuations tr[data-evacuation="%d"]`, ev.ID)
	for sel, want := range map[string]string{
		crow + " td.zone": "a", crow + " td.service": "every service", crow + " td.state": "evacuated", crow + " td.actor": ev.Actor,
	} {
		if got := text(sel); got != want {
			t.Errorf("cluster page %s: %q, want %q", sel, got, want)
		}
	}
	b.screenshot(t, "cluster-evacuated.png")

	// Undo: zone a comes back over shift_back (10s) in steps, and the
	// page follows it without a reload.
	b.do(t, "reopen the service page", 10*time.Second, chromedp.Navigate(page), chromedp.WaitVisible(row))
	eval[bool](t, b, `window.cairnTestMarker = true`)
	eval[bool](t, b, fmt.Sprintf(evacSampler, "ev-a0"))
	runCLI(ctx, t, n, "evacuate", "--zone", "a", "--undo")
	undone := time.Now()
	b.waitJS(t, "zone a returning", cell("ev-a0", "zone")+`?.startsWith("a (returning, ")`, 5*time.Second)
	b.screenshot(t, "service-returning.png")
	if got := text(row + " td.state"); !regexp.MustCompile(`^returning(, \d+% back)?$`).MatchString(got) {
		t.Errorf("the evacuation's state while returning: %q", got)
	}
	b.waitJS(t, "zone a back: neither evacuated nor returning, tier 1, no evacuation listed", every(func(id, zone string) string {
		return fmt.Sprintf(`%s === %q && %s === %q`, cell(id, "zone"), zone, cell(id, "tier"), map[string]string{"a": "1", "b": "0"}[zone])
	})+` && document.getElementById('evacuations').hidden`, 30*time.Second)
	t.Logf("zone a back %s after `cairn evacuate --undo` returned (shift_back 10s)", time.Since(undone).Round(time.Millisecond))
	if !eval[bool](t, b, `window.cairnTestMarker === true`) {
		t.Error("the page reloaded to show the return")
	}
	var samples []evacSample
	if err := json.Unmarshal([]byte(eval[string](t, b, `window.cairnEvacSample() && JSON.stringify(window.cairnEvacSamples)`)), &samples); err != nil {
		t.Fatal(err)
	}
	checkReturn(t, samples)

	// The evacuation is in the service's audit trail, though it was of
	// every service: started, ended (by the undo) and back.
	var trail []wire.Event
	Eventually(t, 5*time.Second, func() error {
		evs, err := n.Client().Events(ctx, healthNS, svc, 100)
		if err != nil {
			return err
		}
		trail = slices.DeleteFunc(evs, func(e wire.Event) bool { return !e.Kind.Evacuation() })
		if got := fmt.Sprint(kindsOf(trail)); got != "[evacuated evacuation_ended evacuation_returned]" {
			return fmt.Errorf("%s/%s's trail has evacuation events %s", healthNS, svc, got)
		}
		return nil
	})
	b.do(t, "open the service's audit trail", 10*time.Second, chromedp.Navigate(n.URL()+"/ui/events.html?"+q.Encode()),
		chromedp.WaitVisible(fmt.Sprintf(`#events tr[data-seq="%d"]`, trail[2].Seq)))
	for i, e := range trail {
		if e.Namespace != "" || e.Service != "" {
			t.Errorf("event %+v of an evacuation of every service names a service", e)
		}
		erow := fmt.Sprintf(`#events tr[data-seq="%d"]`, e.Seq)
		change := "→ " + e.To
		if e.From != "" {
			change = e.From + " " + change
		}
		for sel, want := range map[string]string{
			erow + " td.kind": string(e.Kind), erow + " td.change": change, erow + " td.reason": e.Reason,
			erow + " td.actor": e.Actor, erow + " td.instance": "every service",
		} {
			if got := text(sel); got != want {
				t.Errorf("events page %s: %q, want %q", sel, got, want)
			}
		}
		if i == 0 && (change != "→ evacuated" || !strings.Contains(e.Reason, "ui test: zone a is flaky")) {
			t.Errorf("the evacuated event %+v: want → evacuated, with the reason given", e)
		}
	}
	b.screenshot(t, "events-evacuated.png")
	t.Logf("browser part: %s", time.Since(start).Round(time.Millisecond))
}

func kindsOf(evs []wire.Event) []wire.EventKind {
	out := make([]wire.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// returning is a zone cell of an instance whose zone is coming back:
// "a (returning, 30%)".
var returning = regexp.MustCompile(`^a \(returning, (\d+)%\)$`)

// checkReturn checks what the service page showed of zone a from the
// undo on: evacuated (before the page caught up), then returning at a
// share that never falls, with at least two steps shown and the weight
// served scaled by it, then back.
func checkReturn(t *testing.T, samples []evacSample) {
	t.Helper()
	var shares []int
	phase := "evacuated"
	for _, s := range samples {
		switch m := returning.FindStringSubmatch(s.Zone); {
		case s.Zone == "a (evacuated)" && phase == "evacuated":
			if s.Tier != "3" || s.Weight != "100 / 100" {
				t.Errorf("%+v: evacuated, want tier 3 at its full weight (last, not withdrawn)", s)
			}
		case m != nil && phase != "back":
			phase = "returning"
			share, _ := strconv.Atoi(m[1])
			if len(shares) > 0 && share < shares[len(shares)-1] {
				t.Errorf("the share fell from %d%% to %d%%", shares[len(shares)-1], share)
			}
			if share <= 0 || share >= 100 {
				t.Errorf("%+v: a returning share must be between 0%% and 100%%", s)
			}
			if len(shares) == 0 || share != shares[len(shares)-1] {
				shares = append(shares, share)
			}
			if s.Tier != "1" {
				t.Errorf("%+v: a returning zone is in its own tier (1 for a node in zone b), not last", s)
			}
			if want := fmt.Sprintf("100 / 100 × %d%%", share); s.Weight != want {
				t.Errorf("%+v: weight cell, want %q (served scaled by the share)", s, want)
			}
			if s.States != "" && s.States != "returning" {
				t.Errorf("%+v: the evacuations section lists %q while the zone returns, want returning", s, s.States)
			}
		case s.Zone == "a" && phase == "returning":
			phase = "back"
			if s.States != "" || s.Weight != "100 / 100" {
				t.Errorf("%+v: zone a is back, want its full weight and no evacuation listed", s)
			}
		case s.Zone == "a" && phase == "back":
		default:
			t.Errorf("%+v in phase %s: out of order (the page showed %+v)", s, phase, samples)
		}
	}
	t.Logf("zone a's shares shown while returning: %v%%", shares)
	if phase != "back" || len(shares) < 2 {
		t.Errorf("the page showed %+v: want zone a returning in at least two rising steps, then back", samples)
	}
}
