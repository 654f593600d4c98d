package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
)

// CLI runs the cairn binary as a client of a live server, the leader
// first, and returns its standard output. A run that fails is tried on
// the next server, and again until timeout: a leader change can
// interrupt any command, and the region's commands are idempotent.
func (r *Region) CLI(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	var out []byte
	err := integration.Poll(timeout, 200*time.Millisecond, func() error {
		live := r.liveLeaderFirst()
		if len(live) == 0 {
			return fmt.Errorf("cairn %s: no server runs", strings.Join(args, " "))
		}
		var errs []error
		for _, n := range live {
			if ctx.Err() != nil {
				return integration.StopPolling(ctx.Err())
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			cmd, err := n.CLI(cctx, args...)
			if err != nil {
				cancel()
				return err
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			cancel()
			if err == nil {
				out = stdout.Bytes()
				return nil
			}
			errs = append(errs, fmt.Errorf("cairn %s via %s: %v: %s", strings.Join(args, " "), n.ID, err, strings.TrimSpace(stderr.String())))
		}
		if ctx.Err() != nil {
			return integration.StopPolling(ctx.Err())
		}
		return errors.Join(errs...)
	})
	return out, err
}

// liveLeaderFirst returns the live servers, the leader first if one is
// known.
func (r *Region) liveLeaderFirst() []*integration.Node {
	live := r.Cluster.Live()
	if l, err := r.Cluster.Leader(); err == nil {
		for i, n := range live {
			if n == l {
				live[0], live[i] = live[i], live[0]
			}
		}
	}
	return live
}

// Apply applies the services' definitions with `cairn apply -f`, all in
// one file.
func (r *Region) Apply(ctx context.Context, svcs ...ServiceSpec) error {
	docs := make([]string, 0, len(svcs))
	for _, s := range svcs {
		docs = append(docs, s.YAML())
	}
	f, err := os.CreateTemp(r.dir, "apply-*.yaml")
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.Join(docs, "---\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	_, err = r.CLI(ctx, time.Minute, "apply", "-f", f.Name())
	return err
}

// clientOp runs op with a live server's client, the leader first,
// retrying while the error is retryable, for up to a minute.
func (r *Region) clientOp(ctx context.Context, what string, op func(context.Context, *client.Client) error) error {
	var last error
	err := integration.Poll(time.Minute, 100*time.Millisecond, func() error {
		for _, n := range r.liveLeaderFirst() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			last = op(cctx, n.Client())
			cancel()
			if last == nil {
				return nil
			}
			if ctx.Err() != nil {
				return integration.StopPolling(ctx.Err())
			}
			if !client.IsRetryable(last) {
				return integration.StopPolling(fmt.Errorf("%s via %s: %w (not retryable)", what, n.ID, last))
			}
		}
		return fmt.Errorf("%s: %w", what, last)
	})
	return err
}

// registration is instance in's registration.
func registration(in Instance) wire.Registration {
	return wire.Registration{ID: in.ID, Addresses: []string{in.Addr}, Ports: map[string]int{"main": in.Port},
		Region: RegionName, Zone: in.Zone}
}

// registerAll registers every instance: 16 at a time through the Go
// client, and the leased ones 4 at a time through `cairn register`.
func (r *Region) registerAll(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		errMu sync.Mutex
		errs  []error
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
		cancel()
	}
	byClient, byCLI := make(chan Instance), make(chan Instance)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for in := range byClient {
				var got wire.Registered
				err := r.clientOp(ctx, "register "+in.ID, func(ctx context.Context, cl *client.Client) error {
					var err error
					got, err = cl.Register(ctx, Namespace, in.Name, registration(in))
					return err
				})
				if err != nil {
					fail(err)
					continue
				}
				r.setIncarnation(in.ID, got.Incarnation)
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for in := range byCLI {
				if err := r.registerCLI(ctx, in); err != nil {
					fail(err)
				}
			}
		})
	}
	for _, in := range r.Instances() {
		ch := byClient
		if in.Registrar == ByCLI {
			ch = byCLI
		}
		select {
		case ch <- in:
		case <-ctx.Done():
		}
	}
	close(byClient)
	close(byCLI)
	wg.Wait()
	return errors.Join(errs...)
}

// registerCLI registers a leased instance with `cairn register
// --lease-ttl`.
func (r *Region) registerCLI(ctx context.Context, in Instance) error {
	out, err := r.CLI(ctx, time.Minute, "--output", "json", "register", "--instance", in.ID, "--address", in.Addr,
		"--port", "main="+strconv.Itoa(in.Port), "--region", RegionName, "--zone", in.Zone,
		"--lease-ttl", r.LeaseTTL.String(), Namespace+"/"+in.Name)
	if err != nil {
		return err
	}
	var got struct {
		Incarnation uint64 `json:"incarnation"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Incarnation == 0 {
		return fmt.Errorf("cairn register %s printed %q: want JSON with an incarnation (%v)", in.ID, out, err)
	}
	r.setIncarnation(in.ID, got.Incarnation)
	return nil
}

// renewLoop renews the leased instances with `cairn renew` every third
// of their TTL, until stopped, for at most renewFor.
type renewLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
	fails  atomic.Int64
	rounds atomic.Int64
	mu     sync.Mutex
	last   error
}

// renewFor bounds the renewal loop, whatever happens to the scenario.
const renewFor = 3 * time.Hour

func (l *renewLoop) start(r *Region) {
	ctx, cancel := context.WithTimeout(context.Background(), renewFor)
	l.cancel, l.done = cancel, make(chan struct{})
	var leased []Instance
	for _, in := range r.Instances() {
		if in.Registrar == ByCLI {
			leased = append(leased, in)
		}
	}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(r.LeaseTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, in := range leased {
				if ctx.Err() != nil {
					return
				}
				_, err := r.CLI(ctx, r.LeaseTTL/3, "renew", "--instance", in.ID,
					"--incarnation", strconv.FormatUint(in.Incarnation, 10), Namespace+"/"+in.Name)
				if err != nil && ctx.Err() == nil {
					l.fails.Add(1)
					l.mu.Lock()
					l.last = err
					l.mu.Unlock()
				}
			}
			l.rounds.Add(1)
		}
	}()
}

func (l *renewLoop) stop() {
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
}

func (l *renewLoop) failures() (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.fails.Load()), l.last
}
