package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBudgetValidate: policy.max_unavailable is a count or a percentage
// 0%-100%; anything else is refused naming the field and the rule.
func TestBudgetValidate(t *testing.T) {
	for _, ok := range []Budget{"", "0", "1", "2", "1000000", "0%", "1%", "25%", "100%"} {
		s := validService()
		s.Policy.MaxUnavailable = ok
		if err := s.Validate(); err != nil {
			t.Errorf("max_unavailable %q: %v", ok, err)
		}
	}
	for _, bad := range []Budget{"-1", "1.5", "101%", "25 %", " 2", "%", "2%%", "1000001", "12345678", "1e3", "two", "-5%", "0x10"} {
		s := validService()
		s.Policy.MaxUnavailable = bad
		err := s.Validate()
		checkFieldError(t, err, "policy.max_unavailable")
		if err != nil && !strings.Contains(err.Error(), "percentage") {
			t.Errorf("max_unavailable %q: %v does not state the rule", bad, err)
		}
	}
}

// TestBudgetLimit: a count is itself, a percentage rounds up, unset is
// the default 25% (never below one instance of a service that has any).
func TestBudgetLimit(t *testing.T) {
	for _, tt := range []struct {
		b    Budget
		base int
		want int
	}{
		{"2", 10, 2}, {"2", 1, 2}, {"0", 10, 0}, {"0%", 10, 0},
		{"25%", 10, 3}, {"25%", 12, 3}, {"25%", 13, 4}, {"100%", 7, 7}, {"1%", 1, 1},
		{"", 1, 1}, {"", 4, 1}, {"", 5, 2}, {"", 10, 3}, {"", 0, 0},
		{"bad", 10, 0},
	} {
		if got := tt.b.Limit(tt.base); got != tt.want {
			t.Errorf("Budget(%q).Limit(%d) = %d, want %d", tt.b, tt.base, got, tt.want)
		}
	}
	if DefaultMaxUnavailable.Limit(1) != 1 {
		t.Errorf("the default does not let a single-instance service be drained")
	}
}

// TestBudgetJSONAndYAML: a count reads and writes as a number, a
// percentage as a string; both formats accept either, and a definition
// without the field keeps it unset.
func TestBudgetJSONAndYAML(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"max_unavailable": 2}`, `2`},
		{`{"max_unavailable": "2"}`, `2`},
		{`{"max_unavailable": "25%"}`, `25%`},
		{`{"max_unavailable": null}`, ``},
		{`{}`, ``},
		{`{"max_unavailable": 1.5}`, `1.5`}, // kept for Validate to refuse, naming the field
	} {
		var p Policy
		if err := json.Unmarshal([]byte(tt.in), &p); err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if string(p.MaxUnavailable) != tt.want {
			t.Errorf("%s: max_unavailable %q, want %q", tt.in, p.MaxUnavailable, tt.want)
		}
	}
	var p Policy
	if err := json.Unmarshal([]byte(`{"max_unavailable": true}`), &p); err == nil {
		t.Errorf("a JSON boolean was taken as a budget: %q", p.MaxUnavailable)
	}
	for b, want := range map[Budget]string{"2": `"max_unavailable":2`, "25%": `"max_unavailable":"25%"`} {
		out, err := json.Marshal(Policy{MaxUnavailable: b})
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("Policy{MaxUnavailable: %q} = %s, %v; want it to hold %s", b, out, err, want)
		}
	}
	if out, _ := json.Marshal(Policy{}); strings.Contains(string(out), "max_unavailable") {
		t.Errorf("an unset budget is written: %s", out)
	}

	doc := func(v string) string {
		return "namespace: a\nname: b\nports: [{name: p, number: 1}]\npolicy: {max_unavailable: " + v + "}\n"
	}
	for v, want := range map[string]Budget{"2": "2", `"25%"`: "25%", "25%": "25%", "null": ""} {
		svcs, err := ParseServices(strings.NewReader(doc(v)))
		if err != nil {
			t.Errorf("max_unavailable: %s: %v", v, err)
			continue
		}
		if got := svcs[0].Policy.MaxUnavailable; got != want {
			t.Errorf("max_unavailable: %s read as %q, want %q", v, got, want)
		}
	}
	if _, err := ParseServices(strings.NewReader(doc("[1, 2]"))); err == nil || !strings.Contains(err.Error(), "max_unavailable") {
		t.Errorf("a YAML list as max_unavailable: %v, want an error naming the field", err)
	}
	svcs, err := ParseServices(strings.NewReader(doc("101%")))
	if err != nil {
		t.Fatal(err)
	}
	checkFieldError(t, svcs[0].WithDefaults().Validate(), "policy.max_unavailable")
}

// TestDisruptionBudgetWords: the words a refusal is made of.
func TestDisruptionBudgetWords(t *testing.T) {
	d := DisruptionBudget{MaxUnavailable: "2", Instances: 10, Limit: 2, InUse: 2,
		Unavailable: []Unavailable{{InstanceID: "i1", Why: "draining"}, {InstanceID: "i2", Why: "unhealthy"}}}
	if got, want := d.Describe()+" is used by "+d.Holders(), "max_unavailable 2 of 10 instances is used by i1 (draining), i2 (unhealthy)"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	d = DisruptionBudget{MaxUnavailable: "25%", Default: true, Instances: 12, Limit: 3}
	for i := range 7 {
		d.Unavailable = append(d.Unavailable, Unavailable{InstanceID: string(rune('a' + i)), Why: "starting"})
	}
	if got, want := d.Describe(), "max_unavailable 25% (the default) = 3 of 12 instances"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := d.Holders(); !strings.HasSuffix(got, "e (starting), 2 more") {
		t.Errorf("holders %q: want five named and the rest counted", got)
	}
}
