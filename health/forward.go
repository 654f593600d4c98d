package health

import (
	"context"
	"fmt"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// Evidence reaches the evaluating leader one way: on the leader it goes
// into its Node; on a follower, a Forwarder sends it to the leader's API
// (POST /v1/internal/probe-results, /v1/internal/outcomes), whose
// handlers put it into the leader's Node. The decision is Leading's:
// handleBatch makes it for this node's probe batches, Outcomes below for
// the load reports of this node's xDS subscribers, and Evaluating for
// the API's evidence routes.

// ForwardConfig configures a Forwarder.
type ForwardConfig struct {
	// Store is this node's store replica: it names the leader. Required.
	Store *store.Store
	// Token is what the evidence is sent with: a prober token naming
	// this node (or an admin token).
	Token string
	// Dial returns a client of the API at addr (HOST:PORT), with token:
	// client.New, or a TLS client between servers. Defaults to
	// client.New.
	Dial func(addr, token string) (*client.Client, error)
}

// Forwarder sends a follower's evidence to the leader. It keeps one
// client for probe results and one for outcomes, each redialled when the
// leader changes: ProbeResults and Outcomes may run at the same time, but
// each must be called from one goroutine (the health loop's, the xDS
// server's). Close releases both.
type Forwarder struct {
	probes, outcomes leaderClient
}

// NewForwarder returns a Forwarder; it dials nothing until asked.
func NewForwarder(cfg ForwardConfig) *Forwarder {
	if cfg.Dial == nil {
		cfg.Dial = client.New
	}
	return &Forwarder{probes: leaderClient{cfg: cfg}, outcomes: leaderClient{cfg: cfg}}
}

// ProbeResults sends this node's probe report to the leader and returns
// its reply: Config.Push.
func (f *Forwarder) ProbeResults(ctx context.Context, r wire.ProbeReport) (wire.ProbeReply, error) {
	cl, err := f.probes.get()
	if err != nil {
		return wire.ProbeReply{}, err
	}
	return cl.ProbeResults(ctx, r)
}

// Outcomes returns the function that takes the load reports n's xDS
// subscribers send (xdsserver.Config.Outcomes): into n when n is the
// evaluating leader, to the leader through f otherwise. It is called
// from one goroutine.
func (f *Forwarder) Outcomes(n *Node) func(context.Context, wire.OutcomeBatch) error {
	return func(ctx context.Context, b wire.OutcomeBatch) error {
		if n.Leading() {
			n.OutcomeBatch(b)
			return nil
		}
		cl, err := f.outcomes.get()
		if err != nil {
			return err
		}
		_, err = cl.ForwardOutcomes(ctx, b)
		return err
	}
}

// Close releases the clients.
func (f *Forwarder) Close() {
	f.probes.close()
	f.outcomes.close()
}

// leaderClient is a client of the leader's API, kept while the leader
// stays. It is not safe for concurrent use.
type leaderClient struct {
	cfg  ForwardConfig
	addr string
	cl   *client.Client
}

func (l *leaderClient) get() (*client.Client, error) {
	_, addr := l.cfg.Store.Leader()
	if addr == "" {
		return nil, store.ErrNoLeader
	}
	if addr != l.addr || l.cl == nil {
		l.close()
		cl, err := l.cfg.Dial(addr, l.cfg.Token)
		if err != nil {
			return nil, err
		}
		cl.RetryFor = -1 // the next batch comes soon enough
		l.cl, l.addr = cl, addr
	}
	return l.cl, nil
}

func (l *leaderClient) close() {
	if l.cl != nil {
		l.cl.Close()
		l.cl = nil
	}
}

// OutcomeBatch takes a batch of load reports a server's xDS subscribers
// sent it, each under the caller that server authenticated (on the
// leader): Outcomes for each, with the replies summed.
func (n *Node) OutcomeBatch(b wire.OutcomeBatch) wire.OutcomeReply {
	reply := wire.OutcomeReply{Discarded: map[string]int{}}
	for _, rep := range b.Reports {
		one := n.Outcomes(rep.Observer, rep.OutcomeReport)
		reply.Accepted += one.Accepted
		for why, k := range one.Discarded {
			reply.Discarded[why] += k
		}
	}
	if len(reply.Discarded) == 0 {
		reply.Discarded = nil
	}
	return reply
}

// Evaluating returns nil when n is the evaluating leader, which takes
// evidence, and otherwise the error to answer a caller with (wrapping
// store.ErrNoLeader: retry, or ask the leader). n may be nil: a node
// that runs no evaluator.
func (n *Node) Evaluating() error {
	if n == nil {
		return fmt.Errorf("this node runs no health evaluator: %w", store.ErrNoLeader)
	}
	if !n.Leading() {
		return fmt.Errorf("this node is not the evaluating leader (yet); retry: %w", store.ErrNoLeader)
	}
	return nil
}
