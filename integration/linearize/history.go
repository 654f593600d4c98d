package linearize

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder keeps every operation of a run: who made it, what it asked
// and answered, when it was sent and when the answer came, in
// nanoseconds of a monotonic clock since the recorder was made. It is
// safe for concurrent use.
type Recorder struct {
	start time.Time // read with time.Since: monotonic

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewRecorder starts the recorder's clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the recorder's clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Call is an operation sent and not yet answered.
type Call struct {
	r      *Recorder
	client int
	in     Input
	at     int64
}

// Begin records that client sends in, now.
func (r *Recorder) Begin(client int, in Input) *Call {
	return &Call{r: r, client: client, in: in, at: r.Now()}
}

// End records the answer, now. An Unknown answer is kept as an
// operation that never completed: History gives it a completion after
// every other, so that porcupine may place it anywhere after it was sent,
// or nowhere. note (the node asked, the status, the error) is kept for
// the report.
func (c *Call) End(out Output, note string) {
	ret := c.r.Now()
	if ret <= c.at {
		ret = c.at + 1
	}
	if out.Result == Unknown {
		if c.in.Kind == Renew || c.in.Kind == Read {
			// A renewal changes nothing the model sees (the lease is
			// the leader's, outside it), and a read nothing at all: of
			// unknown outcome, either adds nothing to check, and would
			// only stay open to the end of the history.
			return
		}
		ret = -1 // set by History
	}
	c.r.mu.Lock()
	c.r.ops = append(c.r.ops, porcupine.Operation{ClientId: c.client, Input: c.in, Call: c.at,
		Output: out, Return: ret, Metadata: note})
	c.r.mu.Unlock()
}

// History returns the operations recorded so far, each operation whose
// outcome is unknown completing after all the others.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	ops := slices.Clone(r.ops)
	r.mu.Unlock()
	var last int64
	for _, op := range ops {
		last = max(last, op.Call, op.Return)
	}
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = last + 1
		}
	}
	return ops
}

// Stats counts a history's operations by kind and result.
type Stats struct {
	Ops     int
	Unknown int
	ByKind  map[Kind]map[Result]int
}

func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations, %d of unknown outcome;", s.Ops, s.Unknown)
	for k := Register; k <= Read; k++ {
		m := s.ByKind[k]
		if len(m) == 0 {
			continue
		}
		fmt.Fprintf(&b, " %s", k)
		for r := Unknown; r <= NotFound; r++ {
			if m[r] > 0 {
				fmt.Fprintf(&b, " %s %d", r, m[r])
			}
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Count returns the statistics of ops.
func Count(ops []porcupine.Operation) Stats {
	s := Stats{ByKind: map[Kind]map[Result]int{}}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		s.Ops++
		if out.Result == Unknown {
			s.Unknown++
		}
		if s.ByKind[in.Kind] == nil {
			s.ByKind[in.Kind] = map[Result]int{}
		}
		s.ByKind[in.Kind][out.Result]++
	}
	return s
}

// Verdict is the outcome of a check.
type Verdict struct {
	// Result is porcupine's: Ok, Illegal, or Unknown when it ran out of
	// time (inconclusive).
	Result porcupine.CheckResult
	// Keys are the instance keys whose history is not linearizable.
	Keys []string
	// Excerpt is, for each such key, its history in order of sending,
	// one operation a line, with times in ms since the recorder started.
	Excerpt string
}

// Check checks ops against the model within timeout. When the history
// is not linearizable it checks each key on its own to name the keys at
// fault and show their histories; when visualize is not empty, it also
// writes porcupine's HTML visualisation there.
func Check(ops []porcupine.Operation, timeout time.Duration, visualize string) Verdict {
	m := Model()
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	v := Verdict{Result: res}
	if res == porcupine.Ok {
		return v
	}
	if visualize != "" {
		if f, err := os.Create(visualize); err == nil {
			_ = porcupine.Visualize(m, info, f)
			_ = f.Close()
		}
	}
	var b strings.Builder
	for _, part := range m.Partition(ops) {
		r := porcupine.CheckOperationsTimeout(m, part, timeout)
		if r == porcupine.Ok {
			continue
		}
		key := part[0].Input.(Input).Key
		v.Keys = append(v.Keys, key)
		fmt.Fprintf(&b, "instance %s (%s):\n", key, r)
		b.WriteString(Excerpt(part))
	}
	v.Excerpt = b.String()
	return v
}

// Excerpt lists ops in order of sending: sent and answered (ms since the
// recorder started; "?" for an outcome unknown), client, operation and
// answer, and the note.
func Excerpt(ops []porcupine.Operation) string {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	var last int64
	for _, op := range ops {
		last = max(last, op.Return)
	}
	var b strings.Builder
	for _, op := range ops {
		ret := fmt.Sprintf("%10.3f", float64(op.Return)/1e6)
		if op.Return == last && op.Output.(Output).Result == Unknown {
			ret = fmt.Sprintf("%10s", "?")
		}
		fmt.Fprintf(&b, "  %10.3f %s  c%-2d %-55s %v\n", float64(op.Call)/1e6, ret, op.ClientId,
			Describe(op.Input.(Input), op.Output.(Output)), op.Metadata)
	}
	return b.String()
}
