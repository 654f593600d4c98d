package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

// WriterConfig describes what a Writer registers.
type WriterConfig struct {
	// Namespace and Service name the service the instances register in;
	// it must be applied already.
	Namespace, Service string
	// Rate is the registrations per second the writer offers, at most;
	// defaults to 50.
	Rate int
	// Registration returns the i-th registration (i = 0, 1, ...). Each
	// must have an id of its own.
	Registration func(i int) wire.Registration
}

// Ack is one acknowledged registration.
type Ack struct {
	ID          string
	Incarnation uint64
	Via         string    // the raft id of the node the request was sent to
	Sent        time.Time // when the accepted attempt was sent
	Acked       time.Time
}

// Writer registers instances one at a time, at most Rate a second,
// sending each to the next node of the cluster in turn and retrying it on
// the next one, after 10ms, while the answer is 503 or no answer (a
// registration is idempotent: a retry of a committed one returns the
// committed incarnation). It keeps every acknowledgement. Any other error
// stops it, and is then its Err. It is for measuring and checking
// failover: a killed node's connection errors just move it on.
type Writer struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	acks     []Ack
	changed  chan struct{} // closed and replaced on every ack, and on a fatal error
	attempts int           // registrations attempted (acknowledged or not)
	retries  int           // attempts that failed and were retried
	fatal    error
}

// StartWriter starts a writer against c's nodes. It runs until ctx is
// done, Stop is called, or an error that is not worth a retry.
func StartWriter(ctx context.Context, c *Cluster, cfg WriterConfig) *Writer {
	if cfg.Rate <= 0 {
		cfg.Rate = 50
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Writer{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.run(ctx, c.Nodes, cfg)
	}()
	return w
}

func (w *Writer) run(ctx context.Context, nodes []*Node, cfg WriterConfig) {
	pace := time.NewTicker(time.Second / time.Duration(cfg.Rate))
	defer pace.Stop()
	next := 0
	for i := 0; ; i++ {
		reg := cfg.Registration(i)
		w.mu.Lock()
		w.attempts = i + 1
		w.mu.Unlock()
		for {
			n := nodes[next%len(nodes)]
			next++
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			sent := time.Now()
			r, err := n.Client().Register(actx, cfg.Namespace, cfg.Service, reg)
			cancel()
			if err == nil {
				w.update(func() {
					w.acks = append(w.acks, Ack{ID: reg.ID, Incarnation: r.Incarnation, Via: n.ID, Sent: sent, Acked: time.Now()})
				})
				break
			}
			if ctx.Err() != nil {
				return
			}
			if !client.IsRetryable(err) && !errors.Is(err, context.DeadlineExceeded) {
				w.update(func() { w.fatal = fmt.Errorf("register %s via %s: %w", reg.ID, n.ID, err) })
				return
			}
			w.mu.Lock()
			w.retries++
			w.mu.Unlock()
			select { // retry on the next node after a short pause
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-pace.C:
		}
	}
}

// update applies f under the lock and wakes every WaitAcks.
func (w *Writer) update(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
	close(w.changed)
	w.changed = make(chan struct{})
}

// WaitAcks waits until cond holds for the acknowledgements so far (in the
// order they came, which is the order they were sent), and fails if the
// writer fails or stops first, or ctx is done. cond runs with the writer
// locked: it must not keep the slice or call the writer.
func (w *Writer) WaitAcks(ctx context.Context, cond func([]Ack) bool) error {
	stopped := false
	for {
		w.mu.Lock()
		ok, fatal, ch, n := cond(w.acks), w.fatal, w.changed, len(w.acks)
		w.mu.Unlock()
		if ok {
			return nil
		}
		if fatal != nil {
			return fatal
		}
		if stopped {
			return fmt.Errorf("the writer stopped with %d registrations acknowledged", n)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w with %d registrations acknowledged", ctx.Err(), n)
		case <-w.done:
			stopped = true // look once more: nothing changes from now on
		case <-ch:
		}
	}
}

// FirstAckAfter waits for the acknowledgement of the first registration
// sent after t: after a kill at t, the moment writes were accepted again.
func (w *Writer) FirstAckAfter(ctx context.Context, t time.Time) (Ack, error) {
	var first Ack
	err := w.WaitAcks(ctx, func(acks []Ack) bool {
		for i := len(acks) - 1; i >= 0 && acks[i].Sent.After(t); i-- {
			first = acks[i]
		}
		return !first.Sent.IsZero()
	})
	return first, err
}

// Stop stops the writer and waits until it has. A registration in flight
// is abandoned: it may commit without an acknowledgement. Stop may be
// called more than once.
func (w *Writer) Stop() {
	w.cancel()
	<-w.done
}

// Acks returns a copy of the acknowledgements so far, in order.
func (w *Writer) Acks() []Ack {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Ack(nil), w.acks...)
}

// Err returns the error that stopped the writer, if one did.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

// Attempts returns how many registrations the writer has attempted:
// those of Registration(0) to Registration(Attempts()-1), acknowledged or
// not. No other registration was sent.
func (w *Writer) Attempts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.attempts
}

// Retries returns how many attempts failed and were retried.
func (w *Writer) Retries() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.retries
}
