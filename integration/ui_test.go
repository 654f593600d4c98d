package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/cairn-sd/cairn/wire"
)

// EnvUIScreenshots names a directory the dashboard tests also write
// their screenshots to (they always write them to the test's temp dir).
const EnvUIScreenshots = "CAIRN_UI_SCREENSHOTS"

// browser is a headless Chromium tab that counts the page's JavaScript
// errors: console.error calls and uncaught exceptions.
type browser struct {
	ctx   context.Context // the tab's; each step derives a deadline from it
	shots string          // the test's directory for screenshots
	mu    sync.Mutex
	errs  []string
	wg    sync.WaitGroup
}

// newBrowser starts Chromium (skipped when it is not installed, failed
// under CI=true) with one tab, and stops it when the test ends; extra
// are more of its flags.
func newBrowser(t *testing.T, parent context.Context, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	exe := needTool(t, "chromium", "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 800))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	tctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{ctx: tctx, shots: t.TempDir()}
	// Subscribing starts the browser; the subscriptions end with the tab.
	console := chromedp.Events(tctx, runtime.ConsoleAPICalled)
	exceptions := chromedp.Events(tctx, runtime.ExceptionThrown)
	b.wg.Go(func() {
		for ev, err := range console {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.record("console.error: " + strings.Join(args, " "))
			}
		}
	})
	b.wg.Go(func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.record((&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	})
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		b.wg.Wait()
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("%d JavaScript errors:\n%s", len(errs), strings.Join(errs, "\n"))
		}
	})
	return b
}

func (b *browser) record(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, s)
}

func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errs)
}

// do runs the steps, bounded by timeout, and fails the test with what
// failed and the JavaScript errors so far.
func (b *browser) do(t *testing.T, what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v (JavaScript errors: %q)", what, err, b.errors())
	}
}

// eval evaluates a JavaScript expression, bounded by 5s.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitJS waits until the JavaScript expression is true, up to timeout,
// polling every 20ms in the page; on failure it reports what the page
// shows.
func (b *browser) waitJS(t *testing.T, what, expr string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond),
		chromedp.WithPollingTimeout(timeout)))
	if err == nil {
		return
	}
	sctx, scancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer scancel()
	shown, serr := chromedp.Run(sctx, chromedp.Evaluate[string](`document.body.innerText`))
	t.Fatalf("%s: %v (JavaScript errors: %q); the page shows (%v):\n%s", what, err, b.errors(), serr, shown)
}

// screenshot writes the page to name in the test's temp dir and, when
// CAIRN_UI_SCREENSHOTS is set, in that directory too.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{b.shots}
	if d := os.Getenv(EnvUIScreenshots); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshot %s: %d bytes in %s", name, len(png), strings.Join(dirs, ", "))
}

// TestUIServicesAndDrain drives the dashboard of a real server, with
// ACLs on, in headless Chromium: the page asks for a token and keeps it
// out of the URL; the services page lists what was applied; the service
// page shows each endpoint as the API does; a drain shows there within
// 2s without a reload. Any JavaScript error fails the test.
func TestUIServicesAndDrain(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c, admin, reader := startACLNode(t)
	n := c.Nodes[0]
	ctx := ctxT(t, time.Minute)
	const svc = "uiweb"
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, drain_window: 1h, slow_start: 0s}"))
	incs := map[string]uint64{}
	for i := range 3 {
		id := fmt.Sprintf("ui-%d", i)
		r := registerLoopback(ctx, t, c, svc, id, 8080, func(r *wire.Registration) {
			r.Addresses = []string{fmt.Sprintf("127.0.0.%d", 61+i)}
		})
		incs[id] = r.Incarnation
	}

	b := newBrowser(t, ctx)
	start := time.Now()
	// Without a token the API answers 401: the page asks for one.
	b.do(t, "open the services page", 15*time.Second, chromedp.Navigate(n.URL()+"/ui"),
		chromedp.WaitVisible("#token-form"))
	b.do(t, "enter the token", 5*time.Second, chromedp.SendKeys("#token-input", reader),
		chromedp.Click(`#token-form button[type="submit"]`))
	row := fmt.Sprintf(`tr[data-service="%s/%s"]`, healthNS, svc)
	b.waitJS(t, "the services page lists the service with its 3 instances",
		fmt.Sprintf(`document.querySelector('%s td.instances')?.textContent === "3" && document.querySelector('%s td.eligible')?.textContent === "3"`, row, row),
		10*time.Second)
	if got := eval[string](t, b, `location.href`); strings.Contains(got, reader) || !strings.HasSuffix(got, "/ui/") {
		t.Errorf("page URL %q: want /ui/ (redirected), without the token", got)
	}
	if got := eval[string](t, b, `sessionStorage.getItem("cairn.token")`); got != reader {
		t.Errorf("sessionStorage token %q, want the one entered", got)
	}
	if got := eval[bool](t, b, `document.getElementById("token-form").hidden`); !got {
		t.Error("the token prompt is still shown after a token the API accepts")
	}
	b.screenshot(t, "services.png")
	// The namespace filter is in the URL; the token stays in the session.
	b.do(t, "filter another namespace", 10*time.Second, chromedp.Navigate(n.URL()+"/ui/?ns=other"), chromedp.WaitVisible("#empty"))
	if got := eval[int](t, b, `document.querySelectorAll('#services tbody tr').length`); got != 0 {
		t.Errorf("namespace other: %d rows, want none", got)
	}
	b.do(t, "filter the namespace", 10*time.Second, chromedp.Navigate(n.URL()+"/ui/?ns="+healthNS), chromedp.WaitVisible(row))

	// Click through to the service page.
	b.do(t, "open the service page", 10*time.Second, chromedp.Click(row+" td.name a"),
		chromedp.WaitVisible(`tr[data-instance="ui-2"]`))
	if got := eval[string](t, b, `location.search`); got != "?ns="+healthNS+"&svc="+svc {
		t.Errorf("service page query %q", got)
	}
	cell := func(id, class string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-instance="%s"] td.%s')?.textContent`, id, class)
	}
	b.waitJS(t, "three ready, eligible endpoints at full weight", fmt.Sprintf(`[0,1,2].every(i => %s === "ready" && %s === "yes" && %s === "100 / 100")`,
		strings.ReplaceAll(cell("ui-X", "lifecycle"), "ui-X", `ui-'+i+'`), strings.ReplaceAll(cell("ui-X", "eligible"), "ui-X", `ui-'+i+'`),
		strings.ReplaceAll(cell("ui-X", "weight-cell"), "ui-X", `ui-'+i+'`)), 10*time.Second)
	// The page shows what the API says, field for field.
	es, err := endpointsOn(ctx, n, svc)
	if err != nil {
		t.Fatal(err)
	}
	for id, e := range es {
		if got := eval[string](t, b, cell(id, "verdict")); got != e.Verdict.String() {
			t.Errorf("%s: verdict cell %q, API %q", id, got, e.Verdict)
		}
		if got, want := eval[string](t, b, cell(id, "reasons")), strings.Join(e.Reasons, "; "); got != want && !(got == "-" && want == "") {
			t.Errorf("%s: reasons cell %q, API %q", id, got, want)
		}
		if got := eval[string](t, b, cell(id, "addresses")); !strings.HasPrefix(got, e.Addresses[0]) {
			t.Errorf("%s: addresses cell %q, API %v", id, got, e.Addresses)
		}
	}
	b.screenshot(t, "service-before-drain.png")

	// Drain ui-1: the lifecycle cell turns to draining without a reload.
	eval[bool](t, b, `window.cairnTestMarker = true`)
	runCLI(ctx, t, n, "--token", admin, "drain", "--instance", "ui-1", "--incarnation", strconv.FormatUint(incs["ui-1"], 10), healthNS+"/"+svc)
	drained := time.Now()
	b.waitJS(t, "the drain shows on the service page within 2s", cell("ui-1", "lifecycle")+` === "draining"`, 2*time.Second)
	t.Logf("drain shown %s after `cairn drain` returned", time.Since(drained).Round(time.Millisecond))
	if !eval[bool](t, b, `window.cairnTestMarker === true`) {
		t.Error("the page reloaded to show the drain")
	}
	b.screenshot(t, "service.png")
	t.Logf("browser part: %s", time.Since(start).Round(time.Millisecond))
}

// startACLNode starts one server with ACLs: an admin token (the harness's
// clients send it) and a reader token for healthNS only.
func startACLNode(t *testing.T) (c *Cluster, admin, reader string) {
	t.Helper()
	admin, reader = "admin-0123456789abcdefghijklmn", "reader-0123456789abcdefghijklm"
	aclFile := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(aclFile, []byte(fmt.Sprintf("tokens:\n- {secret: %s, scope: admin}\n- {secret: %s, scope: reader, namespaces: [%s]}\n",
		admin, reader, healthNS)), 0o600); err != nil {
		t.Fatal(err)
	}
	return StartClusterAs(t, admin, 1, append(slices.Clone(healthArgs), "--acl-file", aclFile)...), admin, reader
}
