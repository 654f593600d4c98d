package zones

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrInvalid is wrapped by every error New returns for a Config field or a
// static record it rejects, so that cmd can tell a configuration mistake
// (exit code 2, fix the flags or the file) from an I/O failure.
var ErrInvalid = errors.New("zones: invalid configuration")

// FieldError is a Config field that breaks a rule. It wraps ErrInvalid.
type FieldError struct {
	Field string // the Config field, as "NS[1]" or "NSAddrs[\"ns.cairn.internal.\"]"
	Rule  string // what is wrong, with the offending value quoted
}

func (e *FieldError) Error() string { return "zones: " + e.Field + ": " + e.Rule }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// RecordError is a static record that cairn will not serve, or a static
// file that does not parse. It wraps ErrInvalid.
//
// For a record that parsed but breaks a rule of the zone, File and Line
// locate it (Line is the line the record starts on) and Rule says what is
// wrong. For a syntax error, Line is 0 and Err is the parser's error, which
// carries the file, line and column itself.
type RecordError struct {
	File string
	Line int
	Rule string
	Err  error
}

func (e *RecordError) Error() string {
	if e.Err != nil {
		return "zones: static records: " + e.Err.Error()
	}
	return "zones: static records: " + e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Rule
}

// Unwrap makes errors.Is(err, ErrInvalid) hold, and errors.As reach the
// parser's *dns.ParseError for a syntax error.
func (e *RecordError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}
