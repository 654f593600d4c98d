package agent

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-sd/cairn/internal/agentview"
	"github.com/cairn-sd/cairn/internal/backoff"
)

// endpointType is the type URL of the views' resources, EDS's
// (go-control-plane's resource.EndpointType: its package links every
// xDS type, listeners, routes and clusters, which the agent never reads).
const endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

// maxResponse bounds one xDS response the agent reads: at some 220
// bytes an instance, about a million instances.
const maxResponse = 256 << 20

// Run streams views from the servers, in turn, until ctx is done,
// reconnecting with backoff and full jitter, and keeps the file.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.keep(ctx)
	}()
	defer wg.Wait()
	bo := backoff.New(a.cfg.Backoff)
	failing := false // the last attempts got no answer
	for i := 0; ctx.Err() == nil; i++ {
		addr := a.cfg.Servers[i%len(a.cfg.Servers)]
		answered, err := a.session(ctx, addr)
		a.disconnected()
		if ctx.Err() != nil {
			break
		}
		if answered {
			bo.Reset()
		}
		a.m.reconnects.Inc()
		wait := bo.Next()
		// One warning per outage, not one per attempt: a long one would
		// otherwise log twice a minute for as long as it lasts.
		switch {
		case answered:
			a.cfg.Logger.Warn("xDS stream ended; reconnecting", "server", addr, "err", err, "after", wait)
			failing = false
		case !failing:
			a.cfg.Logger.Warn("no xDS server answers; serving the views held, retrying with backoff", "server", addr, "err", err, "after", wait)
			failing = true
		default:
			a.cfg.Logger.Debug("xDS server unreachable; retrying", "server", addr, "err", err, "after", wait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// session runs one stream: it subscribes to every name wanted (with the
// versions held, so that a server need not resend what has not changed),
// applies each response and acknowledges it, and subscribes to names
// wanted later. It reports whether the server answered at all.
func (a *Agent) session(ctx context.Context, addr string) (answered bool, err error) {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A stream that went silent (a server gone without a FIN, a
		// partition) is found by pings within 40 s (field notes A3, A6).
		grpc.WithKeepaliveParams(a.cfg.Keepalive),
		// The first response of a stream carries every view subscribed
		// to: 2,500 services of 8 are 4.4 MB, past gRPC's default of
		// 4 MiB, and an agent refused it forever (bench/cmd/agentmem).
		// Buffers of a message's size, kept by no pool (exactCodec),
		// for the frames as for the message.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponse), grpc.ForceCodecV2(exactCodec{})),
		experimental.WithBufferPool(mem.NopBufferPool{}),
	}, a.cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return false, err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A server must answer the first request of a type, even with
	// nothing (the protocol's rule): one that has not within
	// AnswerTimeout — its stream never opened, or its hub is stuck — is
	// left for the next (field notes A6).
	silent := time.AfterFunc(a.cfg.AnswerTimeout, func() {
		cancel(fmt.Errorf("agent: no answer from %s within %s", addr, a.cfg.AnswerTimeout))
	})
	defer silent.Stop()
	if a.cfg.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.cfg.Token)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return false, cmp.Or(context.Cause(ctx), err)
	}
	node := &corev3.Node{Id: a.cfg.NodeID, Locality: &corev3.Locality{Region: a.cfg.Region, Zone: a.cfg.Zone}}
	names, held := a.subscription()
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: endpointType,
		ResourceNamesSubscribe: names, InitialResourceVersions: held}); err != nil {
		return false, err
	}
	a.mu.Lock()
	a.server = addr
	a.mu.Unlock()
	type recv struct {
		resp *discoveryv3.DeltaDiscoveryResponse
		err  error
	}
	in := make(chan recv)
	go func() {
		for {
			r, err := stream.Recv()
			select {
			case in <- recv{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return answered, context.Cause(ctx)
		case r := <-in:
			if r.err != nil {
				// A stale server that lets the agent go says how old its
				// view is: the agent's views are that old, until it finds
				// a fresh server.
				if age, ok := agentview.ParseStaleAge(stream.Trailer().Get(agentview.StaleAgeKey)); ok {
					a.serverStale(age)
				}
				return answered, cmp.Or(context.Cause(ctx), r.err)
			}
			if !answered {
				// A stale server serves an agent that offered no view; it
				// says so in the header.
				if hdr, err := stream.Header(); err == nil {
					if age, ok := agentview.ParseStaleAge(hdr.Get(agentview.StaleAgeKey)); ok {
						a.serverStale(age)
						a.cfg.Logger.Warn("the xDS server serves a stale view; marked stale", "server", addr, "age", age)
					}
				}
			}
			answered = true
			silent.Stop()
			req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: endpointType, ResponseNonce: r.resp.Nonce}
			if err := a.apply(r.resp); err != nil {
				a.m.nacks.Inc()
				a.cfg.Logger.Warn("refused a view", "server", addr, "err", err)
				req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			}
			if err := stream.Send(req); err != nil {
				return answered, err
			}
		case <-a.wake:
			if sub, unsub := a.takeChanges(); len(sub)+len(unsub) > 0 {
				if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: endpointType,
					ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}); err != nil {
					return answered, err
				}
			}
		case <-tick.C:
			a.reserve()
		}
	}
}

// subscription returns every name wanted, and the versions of the views
// held that a server may take as current. Views restored from disk are
// not offered: what the agent served of them (with withdrawals it
// deferred) is not the server's resource, and the server sends each
// again.
func (a *Agent) subscription() (names []string, held map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.fresh)
	clear(a.dropped)
	held = map[string]string{}
	for name, v := range a.views {
		if v.version != "" {
			held[name] = v.version
		}
	}
	return slices.Sorted(maps.Keys(a.want)), held
}

// takeChanges returns the names wanted that the open stream has not
// subscribed to, and those it must unsubscribe from.
func (a *Agent) takeChanges() (sub, unsub []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sub, unsub = slices.Sorted(maps.Keys(a.fresh)), slices.Sorted(maps.Keys(a.dropped))
	clear(a.fresh)
	clear(a.dropped)
	return sub, unsub
}

// apply applies one response, all of it or none of it: a response with
// one view that cannot be read, or that is older than the view held, or
// that removes a view held from a table older than it, is refused whole,
// and the agent keeps what it holds.
func (a *Agent) apply(resp *discoveryv3.DeltaDiscoveryResponse) error {
	if resp.TypeUrl != "" && resp.TypeUrl != endpointType {
		return fmt.Errorf("agent: response of type %s, not %s", resp.TypeUrl, endpointType)
	}
	// The store revision of the table the response is built from: what a
	// removal, which carries no version, is judged by. A server that
	// does not name one is taken at its word, under the shrink cap.
	tableRev, revErr := strconv.ParseUint(resp.SystemVersionInfo, 10, 64)
	type got struct {
		name, version string
		v             *agentview.View
	}
	var gots []got
	for _, r := range resp.Resources {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := r.GetResource().UnmarshalTo(cla); err != nil {
			return fmt.Errorf("agent: view %q: %w", r.Name, err)
		}
		v, err := agentview.Decode(cla)
		if err != nil {
			return fmt.Errorf("view %q: %w", r.Name, err)
		}
		if name := agentview.Name(v.Service.Namespace, v.Service.Name); name != r.Name {
			return fmt.Errorf("agent: resource %q carries the view of %q", r.Name, name)
		}
		gots = append(gots, got{r.Name, r.Version, v})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range gots {
		if held := a.views[g.name]; held != nil {
			if err := held.accept(g.v); err != nil {
				return err
			}
		}
	}
	if revErr == nil {
		for _, name := range resp.RemovedResources {
			if held := a.views[name]; held != nil {
				if err := held.acceptRemoval(tableRev); err != nil {
					return err
				}
			}
		}
	}
	now := a.cfg.Now()
	for _, g := range gots {
		held := a.views[g.name]
		if held == nil {
			held = &view{name: g.name}
			a.views[g.name] = held
		}
		held.got, held.version, held.received, held.removed = g.v, g.version, now, false
		delete(a.unknown, g.name)
		held.serve(now)
		delete(a.absent, g.name)
	}
	for _, name := range resp.RemovedResources {
		if v := a.views[name]; v != nil && eligible(v.served) > 0 {
			// A view in rotation that the server removes shrinks as any
			// other, under the cap, to nothing: a server that says a
			// service with instances in rotation does not exist (a
			// cluster rebuilt from nothing, a table not caught up) is
			// the large drop the cap is for. It goes once it serves
			// nothing (reserve); until then it answers as held.
			v.got = &agentview.View{Revision: v.got.Revision, Service: v.got.Service}
			v.removed = true
			v.serve(now)
			if len(v.served) > 0 {
				continue
			}
		}
		if a.views[name] != nil || a.want[name] {
			_, held := a.views[name]
			delete(a.views, name)
			a.absent[name] = now
			if !a.pinned[name] && !held {
				a.unknown[name] = now
			}
		}
	}
	// Names never held that a server said do not exist stay subscribed,
	// so that one that comes a moment later (a server restarted from an
	// older table, still catching up) comes at once; past half of
	// MaxViews of them the oldest are unsubscribed, so that the names a
	// flood of queries asks about never fill want (field notes A4). An
	// unsubscribed name is asked about again after AbsentTTL.
	for len(a.unknown) > a.cfg.MaxViews/2 {
		oldest, at := "", time.Time{}
		for name, t := range a.unknown {
			if oldest == "" || t.Before(at) || t.Equal(at) && name < oldest {
				oldest, at = name, t
			}
		}
		delete(a.unknown, oldest)
		delete(a.want, oldest)
		delete(a.fresh, oldest)
		a.dropped[oldest] = true
		a.wakeLocked()
	}
	if len(a.absent) > a.cfg.MaxViews {
		for name, at := range a.absent {
			if !a.want[name] && now.Sub(at) >= a.cfg.AbsentTTL {
				delete(a.absent, name)
			}
		}
	}
	// A server whose table is older than a view held sends nothing
	// older (it holds those views back until it catches up, and then
	// says so with a response from a newer table): until then it does
	// not keep the views current, and the agent is not connected.
	if revErr != nil || tableRev >= a.serial {
		a.restored = false
		if !a.connected {
			a.connected, a.heard = true, false
			a.m.connected.Set(1)
		}
	}
	a.m.applied.Inc()
	err := a.publishLocked()
	// After the table: a query that waited finds the view in it.
	for _, g := range gots {
		a.arrivedLocked(g.name)
	}
	for _, name := range resp.RemovedResources {
		a.arrivedLocked(name)
	}
	return err
}
