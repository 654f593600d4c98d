package linearize

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is a hand-made operation: client, sent and answered (ms; answered
// -1: never, the outcome unknown), what and the answer.
func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	if ret < 0 {
		ret = 1 << 40
		out.Result = Unknown
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret, Metadata: ""}
}

func reg(key, id string) Input                 { return Input{Kind: Register, Key: key, RegID: id} }
func mut(k Kind, key string, inc uint64) Input { return Input{Kind: k, Key: key, Inc: inc} }
func read(key string) Input                    { return Input{Kind: Read, Key: key} }
func ans(r Result, inc uint64, life string) Output {
	return Output{Result: r, Inc: inc, Lifecycle: life}
}

var none = ans(OK, 0, "")

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"register, read, renew, drain, deregister, register again", true, []porcupine.Operation{
			op(0, 0, 10, read("a"), none),
			op(0, 11, 20, reg("a", "r1"), ans(Created, 5, "ready")),
			op(1, 21, 30, read("a"), ans(OK, 5, "ready")),
			op(1, 31, 40, mut(Renew, "a", 5), ans(OK, 5, "ready")),
			op(0, 41, 50, mut(Drain, "a", 5), ans(OK, 5, "draining")),
			op(1, 51, 60, mut(Renew, "a", 5), ans(OK, 5, "draining")),
			op(1, 61, 70, mut(Deregister, "a", 5), ans(OK, 5, "terminated")),
			op(0, 71, 80, mut(Renew, "a", 5), ans(Fenced, 0, "")),
			op(0, 81, 90, reg("a", "r2"), ans(Created, 9, "ready")),
			op(1, 91, 99, read("a"), ans(OK, 9, "ready")),
		}},
		{"concurrent registration and read: either order", true, []porcupine.Operation{
			op(0, 0, 20, reg("a", "r1"), ans(Created, 3, "ready")),
			op(1, 5, 15, read("a"), none),
			op(2, 6, 25, read("a"), ans(OK, 3, "ready")),
		}},
		{"retry of the live registration returns it; a replaced id is fenced", true, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, 20, reg("a", "r1"), ans(OK, 3, "ready")),
			op(1, 21, 30, reg("a", "r2"), ans(Created, 4, "ready")),
			op(0, 31, 40, reg("a", "r1"), ans(Fenced, 0, "")),
			op(0, 41, 50, mut(Drain, "a", 3), ans(Fenced, 0, "")),
		}},
		{"a registration of unknown outcome that took effect", true, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, -1, reg("a", "r2"), Output{}),
			op(1, 30, 40, read("a"), ans(OK, 7, "ready")),
			op(1, 41, 50, mut(Drain, "a", 7), ans(OK, 7, "draining")),
		}},
		{"a registration of unknown outcome that did not", true, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, -1, reg("a", "r2"), Output{}),
			op(1, 30, 40, read("a"), ans(OK, 3, "ready")),
		}},
		{"a drain of unknown outcome seen later", true, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, -1, mut(Drain, "a", 3), Output{}),
			op(1, 30, 40, read("a"), ans(OK, 3, "ready")),
			op(1, 50, 60, read("a"), ans(OK, 3, "draining")),
		}},
		{"keys are independent", true, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(1, 0, 10, reg("b", "r1"), ans(Created, 4, "ready")),
			op(0, 11, 20, read("b"), ans(OK, 4, "ready")),
			op(1, 11, 20, read("a"), ans(OK, 3, "ready")),
		}},

		{"lost acknowledged registration", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(1, 20, 30, read("a"), none),
		}},
		{"lost acknowledged drain", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, 20, mut(Drain, "a", 3), ans(OK, 3, "draining")),
			op(1, 30, 40, read("a"), ans(OK, 3, "ready")),
		}},
		{"lost acknowledged deregistration: a renewal accepted after it", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, 20, mut(Deregister, "a", 3), ans(OK, 3, "terminated")),
			op(1, 30, 40, mut(Renew, "a", 3), ans(OK, 3, "ready")),
		}},
		{"stale read: an older incarnation after a newer was read", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(1, 5, -1, reg("a", "r2"), Output{}),
			op(2, 30, 40, read("a"), ans(OK, 8, "ready")),
			op(2, 50, 60, read("a"), ans(OK, 3, "ready")),
		}},
		{"stale read: a drain read, then not", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, -1, mut(Drain, "a", 3), Output{}),
			op(1, 30, 40, read("a"), ans(OK, 3, "draining")),
			op(2, 50, 60, read("a"), ans(OK, 3, "ready")),
		}},
		{"a fresh id fenced", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 3, "ready")),
			op(0, 11, 20, reg("a", "r2"), ans(Fenced, 0, "")),
		}},
		{"an incarnation that goes down", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 5, "ready")),
			op(0, 11, 20, reg("a", "r2"), ans(Created, 4, "ready")),
		}},
		{"a retry answered with another incarnation", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 5, "ready")),
			op(0, 11, 20, reg("a", "r1"), ans(OK, 6, "ready")),
		}},
		{"a drain fenced with the current incarnation", false, []porcupine.Operation{
			op(0, 0, 10, reg("a", "r1"), ans(Created, 5, "ready")),
			op(0, 11, 20, mut(Drain, "a", 5), ans(Fenced, 0, "")),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(tc.ops, 10*time.Second, "")
			if got := v.Result == porcupine.Ok; got != tc.ok {
				t.Errorf("linearizable %v, want %v\n%s", got, tc.ok, Excerpt(tc.ops))
			}
			if !tc.ok && (len(v.Keys) != 1 || v.Keys[0] != "a" || !strings.Contains(v.Excerpt, "instance a")) {
				t.Errorf("keys at fault %v, excerpt:\n%s", v.Keys, v.Excerpt)
			}
		})
	}
}

// TestRecorderUnknownCompletesLast: an operation of unknown outcome is
// given a completion after every other, so that porcupine may place it
// anywhere after it was sent.
func TestRecorderUnknownCompletesLast(t *testing.T) {
	r := NewRecorder()
	c1 := r.Begin(0, reg("a", "r1"))
	c2 := r.Begin(1, reg("a", "r2"))
	c1.End(Output{}, "timeout")
	c2.End(ans(Created, 4, "ready"), "n1 201")
	c3 := r.Begin(1, read("a"))
	c3.End(ans(OK, 4, "ready"), "n2 200")
	// An unknown renewal is not kept: it changes nothing the model sees.
	r.Begin(2, mut(Renew, "a", 4)).End(Output{}, "timeout")
	h := r.History()
	if len(h) != 3 {
		t.Fatalf("%d operations", len(h))
	}
	for _, op := range h[1:] {
		if op.Call >= op.Return || op.Return >= h[0].Return {
			t.Errorf("%+v: want call < return < the unknown one's return %d", op, h[0].Return)
		}
	}
	if s := Count(h); s.Ops != 3 || s.Unknown != 1 || s.ByKind[Register][Created] != 1 {
		t.Errorf("stats %s", s)
	}
	if v := Check(h, time.Second, ""); v.Result != porcupine.Ok {
		t.Errorf("check: %v\n%s", v.Result, v.Excerpt)
	}
}
