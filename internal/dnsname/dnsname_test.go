package dnsname

import (
	"strings"
	"testing"
)

func TestLabel(t *testing.T) {
	for _, tc := range []struct {
		s          string
		ok, okFold bool
		rule       string // part of CheckLabel's error
	}{
		{"web", true, true, ""},
		{"a", true, true, ""},
		{"0", true, true, ""},
		{"a-b", true, true, ""},
		{"node-1f2e", true, true, ""},
		{strings.Repeat("a", 63), true, true, ""},
		{"", false, false, "is required"},
		{strings.Repeat("a", 64), false, false, "at most 63"},
		{"-web", false, false, "may not start or end"},
		{"web-", false, false, "may not start or end"},
		{"-", false, false, "may not start or end"},
		{"Web", false, true, "only lower-case"},
		{"WEB-1", false, true, "only lower-case"},
		{"-Web", false, false, "only lower-case"},
		{"web_1", false, false, "only lower-case"},
		{"web.1", false, false, "only lower-case"},
		{"wéb", false, false, "only lower-case"},
		{"web 1", false, false, "only lower-case"},
	} {
		err := CheckLabel(tc.s)
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.rule) {
			t.Errorf("CheckLabel(%q) = %v, want ok=%v with %q", tc.s, err, tc.ok, tc.rule)
		}
		if got := IsLabel(tc.s); got != tc.ok {
			t.Errorf("IsLabel(%q) = %v, want %v", tc.s, got, tc.ok)
		}
		if got := IsLabelFold(tc.s); got != tc.okFold {
			t.Errorf("IsLabelFold(%q) = %v, want %v", tc.s, got, tc.okFold)
		}
	}
}

// FuzzLabel checks that the three functions agree: IsLabel is CheckLabel
// without the error, and IsLabelFold is IsLabel of the lower-cased string.
func FuzzLabel(f *testing.F) {
	for _, s := range []string{"web", "Web", "-a", "a-", "", "a_b", strings.Repeat("z", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if IsLabel(s) != (CheckLabel(s) == nil) {
			t.Fatalf("IsLabel(%q) = %v, CheckLabel = %v", s, IsLabel(s), CheckLabel(s))
		}
		lower := []byte(s)
		for i, c := range lower {
			if c >= 'A' && c <= 'Z' {
				lower[i] = c + 'a' - 'A'
			}
		}
		if IsLabelFold(s) != IsLabel(string(lower)) {
			t.Fatalf("IsLabelFold(%q) = %v, IsLabel(%q) = %v", s, IsLabelFold(s), lower, IsLabel(string(lower)))
		}
	})
}

func TestLabelAllocations(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = IsLabelFold("Web-1") && IsLabel("web-1") }); n != 0 {
		t.Errorf("IsLabel and IsLabelFold allocate %v times, want 0 (they sit on the query path)", n)
	}
}
