package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/bench/benchproc"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
)

const (
	namespace = "bench"
	portName  = "grpc"
	// basePort is every endpoint's port at the start; admission g of an
	// endpoint (g ≥ 1) uses basePort+g.
	basePort = 20000
)

func serviceName(svc int) string { return fmt.Sprintf("svc-%d", svc) }

// resourceName is the cluster and assignment name of service svc.
func resourceName(svc int) string { return fmt.Sprintf("svc-%d.%s:%s", svc, namespace, portName) }

// endpointAddr is endpoint ep of service svc's address.
func endpointAddr(svc, ep int) string { return fmt.Sprintf("10.%d.%d.%d", svc>>8, svc&255, ep+1) }

// target is a server under load: where its xDS listens, its process,
// and how to change one endpoint through its API.
type target struct {
	name     string
	proc     *benchproc.Process
	grpcAddr string
	// change puts endpoint ep of svc in rotation on port, or (port 0)
	// takes it out, and returns once the target has committed it.
	// Changes of one endpoint never overlap.
	change func(ctx context.Context, svc, ep int, port uint16) error
	// evacuate evacuates -evacuate-zone (forced), or with undo ends
	// that evacuation, and returns once the target has committed it;
	// nil where the target has no evacuations.
	evacuate func(ctx context.Context, undo bool) error
	close    func()
}

// startCairn starts `cairn server --dev` in dir and registers the
// layout through its API.
func startCairn(ctx context.Context, o options, dir string) (*target, error) {
	bin := o.bin
	if bin == "" {
		var err error
		if bin, err = integration.Binary(); err != nil {
			return nil, err
		}
	}
	ports, err := integration.FreePorts(4)
	if err != nil {
		return nil, err
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	httpAddr, grpcAddr := addr(ports[0]), addr(ports[3])
	p, err := benchproc.Start(bin, []string{"server", "--dev", "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", httpAddr, "--raft-addr", addr(ports[1]), "--dns-addr", addr(ports[2]),
		"--grpc-addr", grpcAddr, "--log-level", "warn"}, filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if err := p.WaitReady(ctx, hc, "http://"+httpAddr+"/readyz", 30*time.Second); err != nil {
		p.Stop()
		return nil, fmt.Errorf("starting cairn: %w\n%s", err, p.Tail())
	}
	// A client keeps 64 idle connections: one per 48 callers, so that
	// the callers do not open a connection per call.
	c := &cairn{o: o, inc: make([][]uint64, o.services)}
	closeAll := func() {
		for _, cl := range c.cls {
			cl.Close()
		}
	}
	for range (max(o.workers, 16) + 47) / 48 {
		cl, err := client.New(httpAddr, "")
		if err != nil {
			closeAll()
			p.Stop()
			return nil, err
		}
		c.cls = append(c.cls, cl)
	}
	if err := c.setup(ctx); err != nil {
		closeAll()
		p.Stop()
		return nil, fmt.Errorf("registering the layout in cairn: %w\n%s", err, p.Tail())
	}
	return &target{name: "cairn", proc: p, grpcAddr: grpcAddr, change: c.change, evacuate: c.evacuate,
		close: func() { closeAll(); p.Stop() }}, nil
}

// cairn changes endpoints through cairn's API.
type cairn struct {
	o   options
	cls []*client.Client
	inc [][]uint64 // each endpoint's current incarnation; one writer per endpoint at a time
}

// setup applies the services and registers their endpoints.
func (c *cairn) setup(ctx context.Context) error {
	const batch = 50
	for i := 0; i < c.o.services; i += batch {
		var b strings.Builder
		for s := i; s < min(i+batch, c.o.services); s++ {
			// No check: instances are in rotation once registered. No slow
			// start and no flap limit: a change is one assignment update,
			// and an endpoint may change often in a burst. No disruption
			// budget: the churn withdraws endpoints at will.
			fmt.Fprintf(&b, "---\nnamespace: %s\nname: %s\nports: [{name: %s, number: %d, protocol: tcp}]\npolicy:\n  lease_ttl: 1h\n  slow_start: 0s\n  flap_limit: 0\n  max_unavailable: 100%%\n",
				namespace, serviceName(s), portName, basePort)
		}
		if _, err := c.cls[0].Apply(ctx, []byte(b.String())); err != nil {
			return err
		}
	}
	for s := range c.o.services {
		c.inc[s] = make([]uint64, c.o.endpoints)
	}
	return each(ctx, c.o.services*c.o.endpoints, 16, func(ctx context.Context, i int) error {
		s, e := i/c.o.endpoints, i%c.o.endpoints
		r, err := c.cls[0].Register(ctx, namespace, serviceName(s), wire.Registration{ID: fmt.Sprintf("ep-%d", e),
			Addresses: []string{endpointAddr(s, e)}, Ports: map[string]int{portName: basePort},
			Region: regionOf(c.o, e), Zone: zoneName(c.o, e)})
		if err != nil {
			return fmt.Errorf("registering endpoint %d of %s: %w", e, serviceName(s), err)
		}
		c.inc[s][e] = r.Incarnation
		return nil
	})
}

func (c *cairn) change(ctx context.Context, svc, ep int, port uint16) error {
	cl := c.cls[(svc*c.o.endpoints+ep)%len(c.cls)]
	k := wire.InstanceKey{Namespace: namespace, Service: serviceName(svc), ID: fmt.Sprintf("ep-%d", ep)}
	if port == 0 {
		var err error
		if c.o.withdraw == "drain" {
			_, err = cl.Drain(ctx, k, c.inc[svc][ep])
		} else {
			_, err = cl.Deregister(ctx, k, c.inc[svc][ep])
		}
		return err
	}
	// A registration id of its own, so that it is a new incarnation
	// replacing the drained or deregistered one.
	r, err := cl.Register(ctx, namespace, serviceName(svc), wire.Registration{ID: k.ID,
		Addresses: []string{endpointAddr(svc, ep)}, Ports: map[string]int{portName: int(port)},
		Region: regionOf(c.o, ep), Zone: zoneName(c.o, ep),
		RegistrationID: fmt.Sprintf("p%d", port), Replaces: c.inc[svc][ep]})
	if err != nil {
		return err
	}
	c.inc[svc][ep] = r.Incarnation
	return nil
}

// evacuate evacuates -evacuate-zone in every region, or ends that
// evacuation. Forced: under churn a service may have fewer instances
// outside the zone than its minimum healthy fraction, and what is
// measured is how the shift travels, not the capacity check.
func (c *cairn) evacuate(ctx context.Context, undo bool) error {
	req := wire.EvacuateRequest{Zone: c.o.evacZone, Undo: undo}
	if !undo {
		req.Reason, req.Force = "xdsload", true
	}
	_, err := c.cls[0].Evacuate(ctx, req)
	return err
}

// startPeer starts bench/cmd/xdspeer with the same layout.
func startPeer(ctx context.Context, o options, dir string) (*target, error) {
	bin := o.peerBin
	if bin == "" {
		bin = filepath.Join(dir, "xdspeer")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./bench/cmd/xdspeer").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("building xdspeer (run from the module root): %w\n%s", err, out)
		}
	}
	ports, err := integration.FreePorts(2)
	if err != nil {
		return nil, err
	}
	httpAddr, grpcAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	p, err := benchproc.Start(bin, []string{"-http-addr", httpAddr, "-grpc-addr", grpcAddr, "-services", strconv.Itoa(o.services),
		"-endpoints", strconv.Itoa(o.endpoints), "-port", strconv.Itoa(basePort)}, filepath.Join(dir, "peer.log"))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	if err := p.WaitReady(ctx, hc, "http://"+httpAddr+"/readyz", 30*time.Second); err != nil {
		p.Stop()
		return nil, fmt.Errorf("starting xdspeer: %w\n%s", err, p.Tail())
	}
	change := func(ctx context.Context, svc, ep int, port uint16) error {
		u := fmt.Sprintf("http://%s/change?%s", httpAddr, url.Values{"svc": {strconv.Itoa(svc)}, "ep": {strconv.Itoa(ep)},
			"port": {strconv.Itoa(int(port))}}.Encode())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("xdspeer /change: %s: %s", resp.Status, b)
		}
		return nil
	}
	return &target{name: "linearcache", proc: p, grpcAddr: grpcAddr, change: change,
		close: func() { hc.CloseIdleConnections(); p.Stop() }}, nil
}

// each calls f for every index below n from conc workers, and stops at
// the first error, which it returns (or ctx's).
func each(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idx := make(chan int)
	errc := make(chan error, conc)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range idx {
				if err := f(ctx, i); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case idx <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(idx)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return ctx.Err()
	}
}
