package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// TestUIClusterXDSAndLastContact: a follower's cluster page shows its
// last contact with the leader as an age, and its xDS subscribers by
// revision: one raw delta xDS subscriber of a service's assignment on
// the follower shows as one subscriber, not behind, at the revision the
// API gives (issue 14 item 7).
func TestUIClusterXDSAndLastContact(t *testing.T) {
	needProcesses(t)
	needTool(t, "chromium", "chromium")
	t.Parallel()
	c := StartCluster(t, 3)
	ctx := ctxT(t, time.Minute)
	const svc = "uixds"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}", "{}"))
	_, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// One subscriber on the follower, acknowledging whatever it gets.
	cc, err := xdstest.Dial(follower.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	// The follower refuses streams until its status table is loaded:
	// the subscriber opens another until one lasts.
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	wg.Go(func() {
		for sctx.Err() == nil {
			s, err := xdstest.Open(sctx, cc, xdstest.Options{})
			if err == nil {
				err = s.Subscribe(resourcev3.EndpointType, []string{svc + "." + healthNS + ":http"}, nil)
			}
			for err == nil {
				var resp *discoveryv3.DeltaDiscoveryResponse
				if resp, err = s.Recv(); err == nil {
					err = s.Ack(resp)
				}
			}
			select {
			case <-sctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	var rev uint64
	Eventually(t, 10*time.Second, func() error {
		st, err := follower.Client().Status(ctx)
		if err != nil {
			return err
		}
		if st.LastContact.IsZero() || time.Since(st.LastContact) > 5*time.Second {
			return fmt.Errorf("follower's last contact %v", st.LastContact)
		}
		if x := st.XDS; x == nil || x.Streams != 1 || x.Subscribers != 1 || x.Behind != 0 || len(x.Revisions) != 1 || x.Revisions[0].Revision == 0 {
			return fmt.Errorf("follower's xds %+v, want one stream, one subscriber not behind", st.XDS)
		}
		rev = st.XDS.Revisions[0].Revision
		return nil
	})

	b := newBrowser(t, ctx)
	row := fmt.Sprintf(`#xds-revisions tbody tr[data-revision="%d"]`, rev)
	b.do(t, "open the cluster page", 15*time.Second, chromedp.Navigate(follower.URL()+"/ui/cluster.html"),
		chromedp.WaitVisible(row))
	for sel, want := range map[string]string{row + " td.subscribers": "1", row + " td.behind": "0",
		"#xds-summary": "1 subscriber, 0 behind, on 1 stream"} {
		if got := eval[string](t, b, `document.querySelector('`+sel+`').textContent`); got != want {
			t.Errorf("%s %q, want %q", sel, got, want)
		}
	}
	if n := eval[int](t, b, `document.querySelectorAll('#xds-revisions tbody tr').length`); n != 1 {
		t.Errorf("%d revision rows, want 1", n)
	}
	// Raft heartbeats keep a follower's last contact well under seconds
	// old; the age is redrawn on each status read.
	lc := eval[string](t, b, `document.getElementById('st-last-contact').textContent`)
	if !regexp.MustCompile(`^(\d+ ms|\d+\.\d s) ago$`).MatchString(lc) || strings.HasPrefix(lc, "never") {
		t.Errorf("follower's last contact %q, want an age such as \"120 ms ago\"", lc)
	}
	b.screenshot(t, "cluster-xds.png")
}
