// Package xdssub is a delta xDS subscriber as a load generator or a
// scenario runs thousands of: it opens its stream with retries (backoff
// with full jitter, as clients do when a server refuses them), keeps the
// version of every resource it was sent, and, when its stream ends,
// opens another naming those versions in initial_resource_versions, as
// Envoy does on reconnecting. It checks what it is sent against what it
// holds: a resource sent from an older store revision than the one held,
// with other content, is a regression of its view (SPEC §4, monotonic
// views). The wire protocol is xdsserver/xdstest's.
package xdssub

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// Retry is the pace of a subscriber's attempts to open a stream: the
// n-th retry waits a uniform random time in (0, min(Min·2ⁿ, Max)]
// (full jitter), so that refused clients spread out rather than come
// back together.
type Retry struct {
	Min, Max time.Duration
	// Deadline, if set, ends the attempts: Open fails once it has passed.
	Deadline time.Time
}

func (r Retry) orDefaults() Retry {
	if r.Min <= 0 {
		r.Min = 100 * time.Millisecond
	}
	if r.Max < r.Min {
		r.Max = max(r.Min, 5*time.Second)
	}
	return r
}

// Request is what a stream asks for in its first request.
type Request struct {
	Node  *corev3.Node
	Token string
	Type  string
	Names []string
	// Held is the versions held, by name: initial_resource_versions.
	Held map[string]string
}

// Session is a stream that has had its first answer.
type Session struct {
	Stream *xdstest.Stream
	// First is the stream's first response.
	First *discoveryv3.DeltaDiscoveryResponse
	// Sent is when the successful attempt sent its first request,
	// Answered when its first response came: the server admitted the
	// stream in between.
	Sent, Answered time.Time
	// Attempts counts the attempts it took, the successful one
	// included.
	Attempts int
	cancel   context.CancelFunc
}

// Close ends the stream.
func (s *Session) Close() { s.cancel() }

// ErrGaveUp is Open's error once Retry.Deadline has passed.
var ErrGaveUp = errors.New("xdssub: no stream answered before the deadline")

// Open opens a delta stream on cc asking for req, and waits for its
// first answer; an attempt that fails (refused, or the server away) is
// passed to refused (may be nil) and retried at retry's pace, until one
// is answered, ctx is done or retry.Deadline passes. rng draws the
// jitter.
func Open(ctx context.Context, cc grpc.ClientConnInterface, req Request, retry Retry, rng *rand.Rand, refused func(error)) (*Session, error) {
	retry = retry.orDefaults()
	for n, wait := 1, retry.Min; ; n, wait = n+1, min(2*wait, retry.Max) {
		sctx, cancel := context.WithCancel(ctx)
		sent := time.Now()
		st, err := xdstest.Open(sctx, cc, xdstest.Options{Node: req.Node, Token: req.Token})
		if err == nil {
			if err = st.Subscribe(req.Type, req.Names, req.Held); err != nil {
				// A send fails with EOF when the server has ended the
				// stream already (a refusal): its status is Recv's.
				if _, rerr := st.Recv(); rerr != nil {
					err = rerr
				}
			}
		}
		var first *discoveryv3.DeltaDiscoveryResponse
		if err == nil {
			first, err = st.Recv()
		}
		if err == nil {
			return &Session{Stream: st, First: first, Sent: sent, Answered: time.Now(), Attempts: n, cancel: cancel}, nil
		}
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if refused != nil {
			refused(err)
		}
		if !retry.Deadline.IsZero() && time.Now().After(retry.Deadline) {
			return nil, errors.Join(ErrGaveUp, err)
		}
		t := time.NewTimer(time.Duration(rng.Int64N(int64(wait))) + 1)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Regression is a resource a subscriber was sent from an older store
// revision than the version it held, with other content.
type Regression struct {
	Name, Held, Got string
}

// View is what a subscriber holds: the version of each resource it was
// sent. It is not safe for concurrent use.
type View struct {
	held map[string]string
}

// Held returns a copy of the versions held, by name; nil when none.
func (v *View) Held() map[string]string {
	if len(v.held) == 0 {
		return nil
	}
	out := make(map[string]string, len(v.held))
	for k, x := range v.held {
		out[k] = x
	}
	return out
}

// Version returns the version held of name; "" when none.
func (v *View) Version(name string) string { return v.held[name] }

// Apply takes resp into the view and returns what it regressed: each
// resource whose version names an older store revision than the one
// held and another digest. The same content from an older table is no
// regression (xdsserver's rule: the digest is the resource's identity).
// removed lists the held resources resp removed.
func (v *View) Apply(resp *discoveryv3.DeltaDiscoveryResponse) (regressed []Regression, removed []string) {
	if v.held == nil {
		v.held = map[string]string{}
	}
	for _, r := range resp.Resources {
		if h, ok := v.held[r.Name]; ok && Older(r.Version, h) {
			regressed = append(regressed, Regression{Name: r.Name, Held: h, Got: r.Version})
		}
		v.held[r.Name] = r.Version
	}
	for _, name := range resp.RemovedResources {
		if _, ok := v.held[name]; ok {
			removed = append(removed, name)
			delete(v.held, name)
		}
	}
	return regressed, removed
}

// Older reports whether version got is older than held: from an older
// store revision, with another digest.
func Older(got, held string) bool {
	grev, gdig := xdsserver.ParseVersion(got)
	hrev, hdig := xdsserver.ParseVersion(held)
	return grev < hrev && gdig != hdig
}

// Subscriber is one delta subscriber that reconnects for as long as it
// runs. Its hooks are called from Run's goroutine, one at a time.
type Subscriber struct {
	Request Request // Held is ignored: the subscriber names what it holds
	Retry   Retry
	Rand    *rand.Rand
	// Refused is called for every attempt that failed before its first
	// answer; Opened when a stream is answered, with what the subscriber
	// held when it asked (nil the first time); Closed when an answered
	// stream ends; Received for every response, the first included,
	// with what it regressed and removed (View.Apply).
	Refused  func(err error)
	Opened   func(s *Session, held map[string]string)
	Closed   func(err error)
	Received func(resp *discoveryv3.DeltaDiscoveryResponse, regressed []Regression, removed []string)

	View View
}

// Run opens the subscriber's stream, follows it, acknowledging every
// response, and opens another whenever it ends, until ctx is done.
func (s *Subscriber) Run(ctx context.Context, cc grpc.ClientConnInterface) {
	rng := s.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	for ctx.Err() == nil {
		req := s.Request
		req.Held = s.View.Held()
		sess, err := Open(ctx, cc, req, s.Retry, rng, s.Refused)
		if err != nil {
			return
		}
		if s.Opened != nil {
			s.Opened(sess, req.Held)
		}
		err = s.follow(sess)
		sess.Close()
		if s.Closed != nil && ctx.Err() == nil {
			s.Closed(err)
		}
		if ctx.Err() != nil {
			return
		}
		// A stream that ended comes back after a jittered pause, as a
		// client's does, so that a server's whole population does not
		// return in one instant.
		r := s.Retry.orDefaults()
		t := time.NewTimer(time.Duration(rng.Int64N(int64(r.Min))) + 1)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// follow takes in every response of sess, acknowledging each, until the
// stream ends; it returns why.
func (s *Subscriber) follow(sess *Session) error {
	resp := sess.First
	for {
		reg, rem := s.View.Apply(resp)
		if s.Received != nil {
			s.Received(resp, reg, rem)
		}
		if err := sess.Stream.Ack(resp); err != nil {
			return err
		}
		var err error
		if resp, err = sess.Stream.Recv(); err != nil {
			return err
		}
	}
}
