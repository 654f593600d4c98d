package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-sd/cairn/bench/pace"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

// The seed's churn: its usual rate, and the burst of 16 times it.
const (
	UsualChangesPerMinute = 2_500
	BurstChangesPerMinute = 16 * UsualChangesPerMinute // 40,000
)

// ChurnPhase is a stretch of the churn at one rate.
type ChurnPhase struct {
	Name string
	// Rate is in changes a minute.
	Rate float64
	For  time.Duration
}

// ChurnConfig is a churn on a region's instances through the API:
// withdrawals (cairn deregister) and admissions (a new registration of
// the same instance, replacing the one withdrawn), as xdsload's burst
// makes them. Withdrawals come first until Out instances are out (or on
// their way), then the two alternate, so that the count in rotation
// stays steady.
type ChurnConfig struct {
	Phases  []ChurnPhase
	Workers int
	Out     int
	// Instances are those it may change.
	Instances []Instance
	Seed      uint64
}

// ChangeKind is a withdrawal or an admission.
type ChangeKind uint8

// The kinds of change.
const (
	Withdrawal ChangeKind = iota
	Admission
)

func (k ChangeKind) String() string {
	if k == Withdrawal {
		return "withdrawal"
	}
	return "admission"
}

// ChurnWeight is the base weight of an instance's gen-th admission
// (its first registration is gen 0, the default 100): an assignment
// tells which admission it shows by the weight it publishes.
func ChurnWeight(gen int) int { return 100 + gen }

// Change is one change the churn made. Its times are since the churn's
// Epoch, in nanoseconds, 0 until known; read them atomically.
type Change struct {
	// Endpoint is the instance's index in ChurnConfig.Instances; Gen the
	// admission's generation (ChurnWeight), or the generation withdrawn.
	Endpoint int32
	Kind     ChangeKind
	Gen      int32
	Phase    int8
	start    atomic.Int64
	commit   atomic.Int64
	failed   atomic.Bool
}

// Start is when the API call was made, Commit when it returned (0: not
// yet); Failed whether it failed.
func (c *Change) Start() time.Duration  { return time.Duration(c.start.Load()) }
func (c *Change) Commit() time.Duration { return time.Duration(c.commit.Load()) }
func (c *Change) Failed() bool          { return c.failed.Load() }

// Churn is a running churn.
type Churn struct {
	Epoch     time.Time
	Instances []Instance
	cfg       ChurnConfig
	changes   []Change // preallocated: it never moves
	n         atomic.Int32
	mu        []sync.RWMutex // by endpoint
	byEP      [][]int32      // by endpoint: change ids, oldest first
	done      chan struct{}
	stats     ChurnStats
}

// ChurnStats is what a churn did.
type ChurnStats struct {
	// Phases are each phase's start and end (since Epoch) and the
	// changes it made; PutBack the admissions that ended the churn.
	Phases     []PhaseStats
	PutBack    int
	Failed     int
	FirstError string
}

// PhaseStats is one phase's record.
type PhaseStats struct {
	Name               string
	Asked              float64 // changes a minute
	From, To           time.Duration
	Issued, Withdrawal int
}

// Achieved is the phase's rate, in changes a minute.
func (p PhaseStats) Achieved() float64 {
	if p.To <= p.From {
		return 0
	}
	return float64(p.Issued) / (p.To - p.From).Minutes()
}

// NewChurn lays out cfg's churn, its times counted from epoch; Start
// starts it.
func NewChurn(epoch time.Time, cfg ChurnConfig) (*Churn, error) {
	total := 0.0
	for _, p := range cfg.Phases {
		if p.Rate <= 0 || p.For <= 0 {
			return nil, fmt.Errorf("scenarios: ChurnConfig.Phases: %q needs a positive rate and duration", p.Name)
		}
		total += p.Rate * p.For.Minutes()
	}
	if cfg.Workers < 1 || cfg.Out < 1 || cfg.Out >= len(cfg.Instances) {
		return nil, fmt.Errorf("scenarios: ChurnConfig: Workers (%d) must be positive, Out (%d) between 1 and the instances (%d)",
			cfg.Workers, cfg.Out, len(cfg.Instances))
	}
	return &Churn{Epoch: epoch, Instances: cfg.Instances, cfg: cfg, changes: make([]Change, int(total*1.1)+cfg.Out+100),
		mu: make([]sync.RWMutex, len(cfg.Instances)), byEP: make([][]int32, len(cfg.Instances)), done: make(chan struct{})}, nil
}

// Start starts the churn on r: it runs its phases, then puts back every
// instance it has out, and stops (early when ctx ends).
func (c *Churn) Start(ctx context.Context, r *Region) error {
	// A client of each server's API that retries a 503 (an election) for
	// the client's default budget, as every caller of the API does: the
	// harness's own node clients do not.
	var clients []*client.Client
	for _, n := range r.Nodes() {
		cl, err := client.New(n.URL(), AdminToken)
		if err != nil {
			return err
		}
		clients = append(clients, cl)
	}
	go func() {
		defer close(c.done)
		c.drive(ctx, r, clients)
	}()
	return nil
}

// Wait waits until the churn has stopped and returns what it did.
func (c *Churn) Wait() ChurnStats {
	<-c.done
	return c.stats
}

// Now is the time since the churn's epoch.
func (c *Churn) Now() time.Duration { return time.Since(c.Epoch) }

// Len is the number of changes made so far.
func (c *Churn) Len() int { return int(c.n.Load()) }

// Cap is the most changes the churn can make: ids are below it.
func (c *Churn) Cap() int { return len(c.changes) }

// Change returns change id.
func (c *Churn) Change(id int32) *Change { return &c.changes[id] }

// Of returns endpoint ep's change ids so far, oldest first.
func (c *Churn) Of(ep int) []int32 {
	c.mu[ep].RLock()
	defer c.mu[ep].RUnlock()
	return c.byEP[ep]
}

// add enters a change; false when the log is full. One writer: drive.
func (c *Churn) add(ep int, kind ChangeKind, gen, phase int) (int32, bool) {
	id := c.n.Load()
	if int(id) >= len(c.changes) {
		return 0, false
	}
	ch := &c.changes[id]
	ch.Endpoint, ch.Kind, ch.Gen, ch.Phase = int32(ep), kind, int32(gen), int8(phase)
	c.n.Store(id + 1)
	c.mu[ep].Lock()
	c.byEP[ep] = append(c.byEP[ep], id)
	c.mu[ep].Unlock()
	return id, true
}

// Endpoint states in the driver.
const (
	epIn = iota
	epBusy
	epOut
	epDead // a change failed: left alone
)

// drive runs the phases and the put-back.
func (c *Churn) drive(ctx context.Context, r *Region, clients []*client.Client) {
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 11))
	var mu sync.Mutex
	state := make([]uint8, len(c.Instances))
	gen := make([]int, len(c.Instances))
	inc := make([]uint64, len(c.Instances))
	for i, in := range c.Instances {
		if cur, ok := r.Instance(in.ID); ok {
			inc[i] = cur.Incarnation
		}
	}
	var outQ []int
	withdrawing := 0
	jobs := make(chan int32, c.cfg.Workers)
	var wg sync.WaitGroup
	nodes := r.Nodes()
	for w := range c.cfg.Workers {
		// The workers' calls are spread over the three servers; a
		// follower forwards them to the leader.
		cl := clients[w%len(nodes)]
		wg.Go(func() {
			for id := range jobs {
				ch := &c.changes[id]
				ep := int(ch.Endpoint)
				in := c.Instances[ep]
				mu.Lock()
				cur := inc[ep]
				mu.Unlock()
				ch.start.Store(int64(c.Now()))
				got, err := change(ctx, cl, in, ch, cur)
				ch.commit.Store(int64(c.Now()))
				mu.Lock()
				switch {
				case err != nil:
					ch.failed.Store(true)
					state[ep] = epDead
					c.stats.Failed++
					if c.stats.FirstError == "" {
						c.stats.FirstError = err.Error()
					}
				case ch.Kind == Withdrawal:
					state[ep] = epOut
					outQ = append(outQ, ep)
				default:
					state[ep] = epIn
					inc[ep] = got
				}
				if ch.Kind == Withdrawal {
					withdrawing--
				}
				mu.Unlock()
			}
		})
	}
	// next picks a change: a withdrawal of a random instance in
	// rotation while fewer than Out are out, else an admission of the
	// one out longest.
	next := func(withdraw bool) (ep int, kind ChangeKind, g int, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if withdraw && len(outQ)+withdrawing < c.cfg.Out {
			for range 64 {
				e := rng.IntN(len(c.Instances))
				if state[e] == epIn {
					state[e] = epBusy
					withdrawing++
					return e, Withdrawal, gen[e], true
				}
			}
		}
		if len(outQ) == 0 {
			return 0, 0, 0, false
		}
		e := outQ[0]
		outQ = outQ[1:]
		gen[e]++
		state[e] = epBusy
		return e, Admission, gen[e], true
	}
	issue := func(phase int, ep int, kind ChangeKind, g int) bool {
		id, ok := c.add(ep, kind, g, phase)
		if !ok {
			return false
		}
		select {
		case jobs <- id:
			return true
		case <-ctx.Done():
			c.changes[id].failed.Store(true) // never made
			return false
		}
	}
	for pi, p := range c.cfg.Phases {
		ps := PhaseStats{Name: p.Name, Asked: p.Rate, From: c.Now()}
		// Each change is due at its place in the phase's schedule: one the
		// generator is late for goes at once, rather than being dropped as
		// a ticker's missed tick would be (on a busy host that cost a
		// third of the burst). The phase ends at its time all the same:
		// what the region could not take in it is not made.
		sched := pace.New(time.Now(), p.Rate, p.For, nil)
		for !sched.Over() {
			if _, err := sched.Next(ctx); err != nil {
				break
			}
			ep, kind, g, ok := next(true)
			if !ok {
				continue
			}
			if !issue(pi, ep, kind, g) {
				break
			}
			ps.Issued++
			if kind == Withdrawal {
				ps.Withdrawal++
			}
		}
		ps.To = c.Now()
		c.stats.Phases = append(c.stats.Phases, ps)
	}
	// Put back what is out: the churn ends with the region whole.
	for ctx.Err() == nil {
		mu.Lock()
		busy := withdrawing
		mu.Unlock()
		ep, kind, g, ok := next(false)
		if !ok {
			if busy == 0 {
				break
			}
			// A withdrawal still in flight: its instance joins the queue.
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if !issue(len(c.cfg.Phases), ep, kind, g) {
			break
		}
		c.stats.PutBack++
	}
	close(jobs)
	wg.Wait()
}

// change makes ch, of instance in (its incarnation inc), through cl, and
// returns the admission's incarnation.
func change(ctx context.Context, cl *client.Client, in Instance, ch *Change, inc uint64) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if ch.Kind == Withdrawal {
		_, err := cl.Deregister(cctx, wire.InstanceKey{Namespace: Namespace, Service: in.Name, ID: in.ID}, inc)
		return 0, err
	}
	reg := registration(in)
	// A registration id of its own, replacing the incarnation withdrawn:
	// a new incarnation, at the admission's weight.
	reg.Weight, reg.RegistrationID, reg.Replaces = ChurnWeight(int(ch.Gen)), fmt.Sprintf("churn-%d", ch.Gen), inc
	got, err := cl.Register(cctx, Namespace, in.Name, reg)
	if err == nil && got.Incarnation == 0 {
		err = errors.New("registered with incarnation 0")
	}
	return got.Incarnation, err
}
