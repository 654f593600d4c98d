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

// Second is one second of a caller's sends, counted on every send
// whether its request was kept or not (MaxRecorded bounds only
// Requests): the aggregate the analysis falls back on when requests
// were dropped. A send is counted in the second it was due in.
type Second struct {
	// Sent counts requests sent; Success, Failure and Timeout their
	// results (they sum to Sent). Skipped counts sends skipped because
	// MaxInFlight requests were still waiting: not sent, not in Sent.
	Sent, Success, Failure, Timeout, Skipped int
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
	// Origin is the whole second (Unix time) the first send fell in,
	// and Seconds[i] counts the sends of the second Origin+i s: every
	// send, kept or dropped.
	Origin  time.Time
	Seconds []Second
}

// SecondAt returns the counts of the second that holds t (zero outside
// the record).
func (r Record) SecondAt(t time.Time) Second {
	if r.Origin.IsZero() || t.Before(r.Origin) {
		return Second{}
	}
	if i := int(t.Sub(r.Origin) / time.Second); i < len(r.Seconds) {
		return r.Seconds[i]
	}
	return Second{}
}

// outcomeSlot is the resolution of a recorder's outcome counters: the
// Reporter attributes each slot to the incarnation current over all of
// it (report.go).
const outcomeSlot = 100 * time.Millisecond

// outcomeKey is what the outcome counters are kept by: what the caller
// knows of where a request went, and the slot it was sent in.
type outcomeKey struct {
	instance, addr string
	slot           int64 // Unix time / outcomeSlot
}

// outcomeCount is the results of the requests of one outcomeKey.
type outcomeCount struct{ success, failure, timeout int }

// recorder holds a caller's record while it runs.
type recorder struct {
	mu  sync.Mutex
	max int
	rec Record
	// outcomes, when a Reporter drains them (track), counts every
	// request, kept or dropped, by outcomeKey, until drained.
	track    bool
	outcomes map[outcomeKey]*outcomeCount
}

// second returns the counts of t's second, growing the record to it.
// r.mu is held.
func (r *recorder) second(t time.Time) *Second {
	if r.rec.Origin.IsZero() {
		r.rec.Origin = t.Truncate(time.Second)
	}
	if t.Before(r.rec.Origin) { // a clock step back: counted in the first
		t = r.rec.Origin
	}
	i := int(t.Sub(r.rec.Origin) / time.Second)
	for len(r.rec.Seconds) <= i {
		r.rec.Seconds = append(r.rec.Seconds, Second{})
	}
	return &r.rec.Seconds[i]
}

func (r *recorder) add(q Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.second(q.At)
	s.Sent++
	switch q.Result {
	case Success:
		s.Success++
	case Failure:
		s.Failure++
	case Timeout:
		s.Timeout++
	}
	if r.track {
		k := outcomeKey{instance: q.Instance, addr: q.Addr, slot: q.At.UnixNano() / int64(outcomeSlot)}
		c := r.outcomes[k]
		if c == nil {
			c = &outcomeCount{}
			r.outcomes[k] = c
		}
		switch q.Result {
		case Success:
			c.success++
		case Failure:
			c.failure++
		case Timeout:
			c.timeout++
		}
	}
	if len(r.rec.Requests) >= r.max {
		r.rec.Dropped++
		return
	}
	r.rec.Requests = append(r.rec.Requests, q)
}

func (r *recorder) skip(t time.Time) {
	r.mu.Lock()
	r.rec.Skipped++
	r.second(t).Skipped++
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

// startTracking makes the recorder count outcomes for a Reporter; it
// fails if one already does.
func (r *recorder) startTracking() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.track {
		return false
	}
	r.track, r.outcomes = true, map[outcomeKey]*outcomeCount{}
	return true
}

// drain returns the outcome counters since the last drain and resets
// them.
func (r *recorder) drain() map[outcomeKey]*outcomeCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.outcomes
	r.outcomes = map[outcomeKey]*outcomeCount{}
	return out
}

// snapshot returns the record so far. Requests and Views are
// append-only, so the copy shares their arrays, capped at their length
// (the caller's later appends never show in it): a poll costs a copy
// of the per-second counts only, not of every request.
func (r *recorder) snapshot() Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.rec
	out.Requests = r.rec.Requests[:len(r.rec.Requests):len(r.rec.Requests)]
	out.Views = r.rec.Views[:len(r.rec.Views):len(r.rec.Views)]
	out.Seconds = slices.Clone(r.rec.Seconds)
	return out
}
