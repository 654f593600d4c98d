// Package callers runs the synthetic callers of the scenarios: clients
// that resolve a service the way one population of real clients does,
// send requests to what they were given, record every request, and
// report what they saw to cairn.
//
//   - NewDNS(DNSDirect, …) and NewDNS(DNSAgent, …): a legacy client behind
//     a caching stub, asking a cairn server's or a cairn agent's DNS for
//     A records, optionally from a source address that --subnet places in
//     a zone;
//   - NewEnvoy: requests through an Envoy listener (Envoy resolves, from
//     cairn's xDS, and reports its loads over LRS by itself);
//   - NewGRPC: a grpc-go channel to xds:///<svc>.<ns> calling
//     grpc.health.v1 Health/Check.
//
// A Reporter posts a caller's per-endpoint success, failure and timeout
// counts to POST /v1/outcomes with the caller's own token: each caller
// is one observer in the outcome quorum. The functions of analysis.go
// turn the records into a scenario's figures: the error rate per second
// and population (ErrorRates), the time until 99% of callers stopped
// sending to an instance (StopTime), and when it left or entered what
// each caller was given (Transitions, Presence).
//
// A Caller is safe for concurrent use: its record may be read (Snapshot)
// while it runs. Every loop is bounded by its context.
package callers

import (
	"slices"
	"sync"
	"time"
)

// Kind is a population of callers: how they resolve the service.
type Kind string

// The kinds of callers.
const (
	DNSDirect Kind = "dns-direct"
	DNSAgent  Kind = "dns-agent"
	Envoy     Kind = "envoy"
	GRPCXDS   Kind = "grpc-xds"
)

// Result is what became of one request.
type Result uint8

// The results of a request. A request that passes the caller's deadline
// is a Timeout, whatever the instance would have answered later.
const (
	Success Result = iota
	Failure
	Timeout
)

func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Timeout:
		return "timeout"
	}
	return "unknown"
}

// Request is one request a caller sent.
type Request struct {
	// At is when it was sent.
	At time.Time
	// Instance is the instance id that answered, "" if none did.
	Instance string
	// Addr is the address tried, "host:port", when the caller knows it
	// (DNS and grpc callers; an Envoy caller does not).
	Addr    string
	Result  Result
	Latency time.Duration
	// Err says briefly why it failed ("" on success).
	Err string
}

// View is what a caller was given, recorded when it changed: the
// addresses ("host:port"), sorted. DNS callers record each answer that
// changed; an Envoy caller given EnvoyConfig.Hosts records the hosts its
// Envoy routes to; for the others, what they were given shows in where
// they sent.
type View struct {
	At    time.Time
	Addrs []string
}

// Record is what one caller recorded.
type Record struct {
	Caller   string
	Kind     Kind
	Requests []Request
	Views    []View
	// Blind marks a caller that learns where a request went only from
	// its answer (an Envoy caller): a failed request names no instance.
	Blind bool
	// Dropped counts requests past the recorder's bound, not recorded;
	// Skipped the sends skipped because MaxInFlight requests were still
	// waiting for an answer.
	Dropped, Skipped int
}

// recorder holds a caller's record while it runs.
type recorder struct {
	mu  sync.Mutex
	max int
	rec Record
}

func (r *recorder) add(q Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rec.Requests) >= r.max {
		r.rec.Dropped++
		return
	}
	r.rec.Requests = append(r.rec.Requests, q)
}

func (r *recorder) skip() {
	r.mu.Lock()
	r.rec.Skipped++
	r.mu.Unlock()
}

// view records addrs as the caller's view at t if it differs from the
// last one.
func (r *recorder) view(t time.Time, addrs []string) {
	addrs = slices.Clone(addrs)
	slices.Sort(addrs)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.rec.Views); n > 0 && slices.Equal(r.rec.Views[n-1].Addrs, addrs) {
		return
	}
	r.rec.Views = append(r.rec.Views, View{At: t, Addrs: addrs})
}

// since returns the requests recorded from index i on, and the index
// to ask from next time.
func (r *recorder) since(i int) ([]Request, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i > len(r.rec.Requests) {
		i = len(r.rec.Requests)
	}
	return slices.Clone(r.rec.Requests[i:]), len(r.rec.Requests)
}

func (r *recorder) snapshot() Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.rec
	out.Requests = slices.Clone(r.rec.Requests)
	out.Views = slices.Clone(r.rec.Views)
	return out
}
