// Package dnsname holds the one rule for the names cairn gives things:
// namespaces, services, instance ids, ports, nodes, regions and zones are
// each one DNS label (SPEC §1), because each becomes a label of a name the
// DNS server answers for.
//
// A label is 1–63 characters of a-z, 0-9 and '-', neither starting nor
// ending with '-': the host-name rule of RFC 1123 with the letters in
// lower case. What is stored and configured is held to it exactly
// (CheckLabel, IsLabel); a name read off the wire is compared without
// regard to ASCII case, as DNS compares names (RFC 4343), so IsLabelFold
// also takes upper-case letters.
package dnsname

import (
	"errors"
	"fmt"
)

// MaxLabel is the longest label, in octets (RFC 1035 §2.3.4).
const MaxLabel = 63

// errEmpty is CheckLabel's answer for "": the caller's field is missing.
var errEmpty = errors.New("is required")

// CheckLabel returns nil if s is a label, or an error whose text is the
// rule s breaks ("\"Web\" is not a DNS label: …"), without a field name:
// the caller names the field.
func CheckLabel(s string) error {
	switch {
	case s == "":
		return errEmpty
	case len(s) > MaxLabel:
		return fmt.Errorf("%q is %d characters; a DNS label has at most %d", s, len(s), MaxLabel)
	case !chars(s, false):
		return fmt.Errorf("%q is not a DNS label: only lower-case a-z, 0-9 and '-' are allowed", s)
	case s[0] == '-' || s[len(s)-1] == '-':
		return fmt.Errorf("%q is not a DNS label: it may not start or end with '-'", s)
	}
	return nil
}

// IsLabel reports whether s is a label: CheckLabel(s) == nil, without
// making an error.
func IsLabel(s string) bool { return shape(s) && chars(s, false) }

// IsLabelFold reports whether s is a label once its ASCII letters are
// folded to lower case: the test for a label of a query name.
func IsLabelFold(s string) bool { return shape(s) && chars(s, true) }

// shape checks the length and the ends.
func shape(s string) bool {
	return len(s) > 0 && len(s) <= MaxLabel && s[0] != '-' && s[len(s)-1] != '-'
}

// chars reports whether every byte of s is a-z, 0-9 or '-' (or A-Z, when
// upper is set).
func chars(s string, upper bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || upper && c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
