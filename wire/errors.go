package wire

import (
	"errors"
	"fmt"

	"github.com/cairn-sd/cairn/internal/dnsname"
)

// FieldError is invalid input: it names the field and the rule broken.
// It wraps ErrInvalid.
type FieldError struct {
	Field string
	Rule  string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Rule }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// CheckLabel reports whether s is a DNS label as SPEC §1 defines it (the
// rule is package dnsname's), naming field when it is not.
func CheckLabel(field, s string) error {
	if err := dnsname.CheckLabel(s); err != nil {
		return &FieldError{Field: field, Rule: err.Error()}
	}
	return nil
}

// ErrInvalid is wrapped by every *FieldError: input that breaks a rule.
var ErrInvalid = errors.New("invalid input")

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}
