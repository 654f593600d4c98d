package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration/linearize"
)

// TestStoreKillDuringRegistrationBurst: registrars register new
// instances as fast as the cluster takes them, through every node, and
// in the middle of the burst the leader is killed with SIGKILL; in
// another round all three servers are, at once. Restarted from their
// data dirs, every registration acknowledged before the kill is there,
// with its incarnation: in a consistent read (recorded, and checked with
// the rest of the history) and on every node's replica.
func TestStoreKillDuringRegistrationBurst(t *testing.T) {
	start := time.Now()
	needProcesses(t)
	rounds := sized([]string{"leader", "all"}, []string{"leader", "all", "leader", "all", "leader", "all"})
	c := StartCluster(t, 3)
	ctx := ctxT(t, time.Duration(len(rounds))*time.Minute+time.Minute)
	applyDefinition(ctx, t, c, linService)
	rec := linearize.NewRecorder()
	var rows []row
	for r, what := range rounds {
		acked, sent, present := burstRound(ctx, t, c, rec, r, what)
		rows = append(rows, row{fmt.Sprintf("round %d (kill %s): acknowledged registrations present after restart", r+1, what),
			"all", fmt.Sprintf("%d of %d (%d sent)", present, acked, sent), present == acked})
	}
	rows = append(rows, historyRow(t, rec))
	report(t, "store-kill-in-burst", fmt.Sprintf("kill -9 during a registration burst, %d rounds", len(rounds)), start, rows)
}

// burstRound runs one round: 8 registrars through random nodes; after
// 150 acknowledgements kill the leader ("leader") or every node ("all"),
// go on for half a second, stop, restart what was killed, and read back.
// It returns how many registrations were acknowledged, sent, and found
// with the acknowledged incarnation after the restart.
func burstRound(ctx context.Context, t *testing.T, c *Cluster, rec *linearize.Recorder, round int, what string) (acked, sent, present int) {
	t.Helper()
	const registrars = 8
	urls := nodeURLs(c)
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var keys []string
	incs := map[string]uint64{}
	enough := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var errs []error
	for g := range registrars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			conn := linearize.Conn{HTTP: &http.Client{Transport: tr, Timeout: 3 * time.Second}, Namespace: linNS, Service: linSvc}
			rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
			for i := 0; bctx.Err() == nil; i++ {
				key := fmt.Sprintf("b%d-%d-%d", round, g, i)
				mu.Lock()
				keys = append(keys, key)
				mu.Unlock()
				in := linearize.Input{Kind: linearize.Register, Key: key, RegID: "boot-1"}
				out, err := conn.Do(bctx, rec, 100+g, urls[rng.IntN(len(urls))], in, linearize.Address(g*5000+i))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if out.Result != linearize.Created {
					// Refused, no answer or 503: a short pause, as a
					// registrar's retry makes, not a tight loop on a
					// node that is down.
					select {
					case <-bctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				mu.Lock()
				incs[key] = out.Inc
				if len(incs) >= 150 {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		stop()
		wg.Wait()
		t.Fatalf("round %d: fewer than 150 registrations acknowledged in 30s (%v)", round+1, errors.Join(errs...))
	}
	var killed []*Node
	if what == "all" {
		killed = c.Live()
	} else {
		l, err := c.WaitLeader(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		killed = []*Node{l}
	}
	var kw sync.WaitGroup
	for _, n := range killed {
		kw.Add(1)
		go func() { defer kw.Done(); _ = n.Kill() }()
	}
	kw.Wait()
	mu.Lock()
	t.Logf("round %d: killed %d node(s) with %d registrations acknowledged", round+1, len(killed), len(incs))
	mu.Unlock()
	killedAt := time.Now()
	for time.Since(killedAt) < 500*time.Millisecond && bctx.Err() == nil {
		time.Sleep(50 * time.Millisecond) // the burst goes on for half a second after the kill; not a wait for a condition
	}
	stop()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("round %d: %v", round+1, err)
	}
	restartErrs := make([]error, len(killed))
	for i, n := range killed {
		kw.Add(1)
		go func() { defer kw.Done(); restartErrs[i] = n.Restart() }()
	}
	kw.Wait()
	if err := errors.Join(restartErrs...); err != nil {
		t.Fatalf("round %d: restarting: %v", round+1, err)
	}
	if _, err := c.WaitLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// A consistent read of every key sent, through any node, recorded.
	conn := linearize.Conn{HTTP: &http.Client{Timeout: 5 * time.Second}, Namespace: linNS, Service: linSvc}
	var got map[string]linearize.Output
	Eventually(t, 20*time.Second, func() error {
		for _, u := range urls {
			out, ok, err := conn.ReadAll(ctx, rec, 99, u, keys)
			if err != nil {
				return &stopPolling{err}
			}
			if ok {
				got = out
				return nil
			}
		}
		return errors.New("no node answered a consistent read")
	})
	for k, inc := range incs {
		if o := got[k]; o.Inc == inc {
			present++
		} else {
			t.Errorf("round %d: acknowledged %s (incarnation %d) reads as %+v after the restart", round+1, k, inc, o)
		}
	}
	// Every node's own replica holds them too.
	Eventually(t, 20*time.Second, func() error {
		for _, n := range c.Live() {
			eps, err := n.Client().Endpoints(ctx, linNS, linSvc)
			if err != nil {
				return fmt.Errorf("%s: %v", n.ID, err)
			}
			have := map[string]uint64{}
			for _, e := range eps {
				have[e.InstanceID] = e.Incarnation
			}
			for k, inc := range incs {
				if have[k] != inc {
					return fmt.Errorf("%s: acknowledged %s (incarnation %d) holds %d", n.ID, k, inc, have[k])
				}
			}
		}
		return nil
	})
	return len(incs), len(keys), present
}
