// Package linearize records the operations clients make on cairn's
// instances, with their invocation and completion times, and checks the
// history with porcupine (github.com/anishathalye/porcupine) against a
// model of one instance's registrations, renewals, drains,
// deregistrations and consistent reads (issue 32): no acknowledged write
// lost, no read older than a write acknowledged before it was sent.
//
// The model follows the store's rules for an instance key (store/
// register.go): a registration carries a registration id (every one a
// fresh id, or the same id again for a retry), and a new id allocates a
// new, larger incarnation; a retry of the live registration (same id and
// content, starting or ready) returns it; a retired id is fenced (409).
// Renew, drain and deregister carry an incarnation and are fenced (409)
// unless it is the current one; a drain of a draining instance and a
// deregistration of a terminated one are retries (200). A renewal
// changes no state the model sees: the lease deadline is served from the
// leader's memory (docs/api.md), outside what is linearizable. The
// content of every registration of a key is the same, so that "same
// content" reduces to "same registration id".
//
// Incarnations are allocated by the store, so the model does not predict
// them: a created registration must answer one larger than the current,
// and one whose answer was lost leaves the incarnation unknown (larger
// than the last known) until a read or a mutation tells it. That makes
// the model nondeterministic (porcupine.NondeterministicModel). History
// is partitioned per instance key, which keeps the check fast.
//
// It is a library with no testing.T: the scenarios in package
// integration drive it, and its own tests check the model on hand-made
// histories.
package linearize

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation on one instance.
type Kind uint8

const (
	Register Kind = iota
	Renew
	Drain
	Deregister
	Read // a consistent read (?consistent=true) of the instance
)

func (k Kind) String() string {
	return [...]string{"register", "renew", "drain", "deregister", "read"}[k]
}

// Input is what a client asked.
type Input struct {
	Kind Kind
	// Key is the instance id: the history is partitioned by it.
	Key string
	// RegID is a registration's registration_id.
	RegID string
	// Inc is the incarnation a renew, drain or deregister carried.
	Inc uint64
}

// Result is how the API answered.
type Result uint8

const (
	// Unknown: no answer (a timeout, a connection reset) or 503, which
	// the API documents as "may or may not have committed". The
	// operation may have taken effect at any point after it was sent.
	Unknown  Result = iota
	OK              // 200
	Created         // 201
	Fenced          // 409 fenced
	NotFound        // 404: no such instance (a read that finds none answers OK with Inc 0)
)

func (r Result) String() string {
	return [...]string{"unknown", "ok", "created", "fenced", "not_found"}[r]
}

// Output is the answer.
type Output struct {
	Result Result
	// Inc is the incarnation answered (a registration, a mutation), or
	// read (0: the read found no record).
	Inc uint64
	// Lifecycle is the lifecycle answered or read ("ready", "draining",
	// "terminated"; "" when none).
	Lifecycle string
}

// maxRetired mirrors store.maxRetiredIDs: a record remembers this many
// registration ids it replaced.
const maxRetired = 8

// state is one instance's record as the model knows it. It is a
// comparable value (porcupine compares states with ==).
type state struct {
	exists bool
	// inc is the current incarnation when known; otherwise a lower
	// bound: the current one is larger.
	inc     uint64
	known   bool
	life    string
	regID   string
	retired string // retired registration ids, "\n"-separated, oldest first
}

func (s state) String() string {
	if !s.exists {
		return "none"
	}
	inc := fmt.Sprint(s.inc)
	if !s.known {
		inc = fmt.Sprintf(">%d", s.inc)
	}
	return fmt.Sprintf("inc %s %s reg %q retired [%s]", inc, s.life, s.regID, strings.ReplaceAll(s.retired, "\n", " "))
}

func (s state) isRetired(id string) bool {
	return s.retired != "" && slices.Contains(strings.Split(s.retired, "\n"), id)
}

// incIs returns the states in which the current incarnation is inc:
// s itself when it is known to be, s with it fixed when it was unknown
// and may be, none otherwise.
func (s state) incIs(inc uint64) []state {
	switch {
	case s.known && s.inc == inc:
		return []state{s}
	case !s.known && inc > s.inc:
		s.inc, s.known = inc, true
		return []state{s}
	}
	return nil
}

// incMayDiffer reports whether the current incarnation may be other than
// inc.
func (s state) incMayDiffer(inc uint64) bool { return !s.known || s.inc != inc }

// registered is s after a new incarnation for regID: inc when answered,
// unknown (above the current) when not.
func (s state) registered(regID string, inc uint64) state {
	n := s
	n.exists, n.life, n.regID = true, "ready", regID
	if inc != 0 {
		n.inc, n.known = inc, true
	} else {
		n.known = false // above s.inc, known or a bound
	}
	if s.exists && s.regID != "" && s.regID != regID {
		ids := []string{}
		if s.retired != "" {
			ids = strings.Split(s.retired, "\n")
		}
		ids = append(ids, s.regID)
		if len(ids) > maxRetired {
			ids = ids[len(ids)-maxRetired:]
		}
		n.retired = strings.Join(ids, "\n")
	}
	return n
}

func step(s state, in Input, out Output) []state {
	switch in.Kind {
	case Register:
		return stepRegister(s, in, out)
	case Read:
		if out.Result != OK {
			return nil // failed reads are not recorded
		}
		if out.Inc == 0 {
			if s.exists {
				return nil
			}
			return []state{s}
		}
		if !s.exists || out.Lifecycle != s.life {
			return nil
		}
		return s.incIs(out.Inc)
	}
	return stepMutation(s, in, out)
}

func stepRegister(s state, in Input, out Output) []state {
	live := s.life == "ready" || s.life == "starting"
	switch {
	case s.exists && s.isRetired(in.RegID):
		if out.Result == Fenced || out.Result == Unknown {
			return []state{s}
		}
		return nil
	case s.exists && live && s.regID == in.RegID:
		// A retry: the committed incarnation, nothing changes.
		switch out.Result {
		case Unknown:
			return []state{s}
		case OK:
			return s.incIs(out.Inc)
		}
		return nil
	}
	// A new incarnation, larger than the current.
	switch out.Result {
	case Unknown:
		return []state{s, s.registered(in.RegID, 0)}
	case Created:
		if out.Inc <= s.inc {
			return nil
		}
		return []state{s.registered(in.RegID, out.Inc)}
	}
	return nil
}

func stepMutation(s state, in Input, out Output) []state {
	if !s.exists {
		if out.Result == NotFound || out.Result == Unknown {
			return []state{s}
		}
		return nil
	}
	var next []state
	// The incarnation sent is not the current one: fenced, no change.
	if s.incMayDiffer(in.Inc) && (out.Result == Fenced || out.Result == Unknown) {
		next = append(next, s)
	}
	// It is the current one.
	for _, c := range s.incIs(in.Inc) {
		after, result := c, OK
		switch {
		case in.Kind == Renew && c.life == "terminated", in.Kind == Drain && c.life == "terminated":
			result = Fenced
		case in.Kind == Drain:
			after.life = "draining"
		case in.Kind == Deregister:
			after.life = "terminated"
		}
		switch {
		case out.Result == Unknown:
			next = append(next, c, after)
		case out.Result == result && (result != OK || out.Lifecycle == after.life && out.Inc == c.inc):
			next = append(next, after)
		}
	}
	return next
}

// Model is the porcupine model of one instance, partitioned by key.
func Model() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(Input).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []any { return []any{state{}} },
		Step: func(st, in, out any) []any {
			var res []any
			for _, n := range step(st.(state), in.(Input), out.(Output)) {
				res = append(res, n)
			}
			return res
		},
		DescribeOperation: func(in, out any) string { return Describe(in.(Input), out.(Output)) },
		DescribeState:     func(st any) string { return st.(state).String() },
	}
	return m.ToModel()
}

// Describe is one operation in a line.
func Describe(in Input, out Output) string {
	var ask string
	switch in.Kind {
	case Register:
		ask = fmt.Sprintf("register(%s, %s)", in.Key, in.RegID)
	case Read:
		ask = fmt.Sprintf("read(%s)", in.Key)
	default:
		ask = fmt.Sprintf("%s(%s, %d)", in.Kind, in.Key, in.Inc)
	}
	switch {
	case out.Result == OK && in.Kind == Read && out.Inc == 0:
		return ask + " -> none"
	case out.Result == OK || out.Result == Created:
		return fmt.Sprintf("%s -> %s %d %s", ask, out.Result, out.Inc, out.Lifecycle)
	}
	return fmt.Sprintf("%s -> %s", ask, out.Result)
}
