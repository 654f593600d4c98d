package probe

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// Kind is the protocol a target is checked with. The zero Kind is invalid,
// so that a forgotten field fails validation instead of meaning TCP.
type Kind uint8

// The kinds of check (SPEC §2: TCP connect, HTTP GET, gRPC
// grpc.health.v1.Health/Check).
const (
	TCP Kind = iota + 1
	HTTP
	GRPC
)

var kindNames = [...]string{TCP: "tcp", HTTP: "http", GRPC: "grpc"}

// String returns "tcp", "http" or "grpc", the spelling used in service
// definitions and in metric labels.
func (k Kind) String() string {
	if k >= TCP && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind parses "tcp", "http" or "grpc" (case-insensitive).
func ParseKind(s string) (Kind, error) {
	for k := TCP; int(k) < len(kindNames); k++ {
		if strings.EqualFold(s, kindNames[k]) {
			return k, nil
		}
	}
	return 0, fmt.Errorf("probe: unknown check kind %q (want tcp, http or grpc)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) {
	if k < TCP || int(k) >= len(kindNames) {
		return nil, fmt.Errorf("probe: cannot marshal %s", k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseKind.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// MinInterval is the shortest Interval a target may have: below it the
// schedule would be all overhead, and a probed instance would see a load
// no health check should put on it.
const MinInterval = 100 * time.Millisecond

// Target is one thing to check. Targets are values: the prober copies
// them, and two targets with the same ID are the same schedule.
type Target struct {
	// ID is an opaque, stable key, e.g. "ns/svc/instance#incarnation".
	// Results carry it; SetTargets keeps the schedule of an ID it already
	// has. Required.
	ID string
	// Kind selects the check. Required.
	Kind Kind
	// Addr is the address checked. Required; an unspecified address
	// (0.0.0.0, ::) or port 0 is refused.
	Addr netip.AddrPort
	// Path is the HTTP request path, with an optional query; HTTP only.
	// Empty means "/". It must start with "/" and may carry no scheme,
	// host, user information or fragment: a probe never sends
	// credentials (SPEC §8).
	Path string
	// Service is the grpc.health.v1 service name; gRPC only. Empty asks
	// about the server as a whole.
	Service string
	// Interval is the time between probes (each one jittered by up to
	// ±10%). At least MinInterval.
	Interval time.Duration
	// Timeout bounds one probe, dial included. Positive and at most
	// Interval.
	Timeout time.Duration
}

// ErrInvalidTarget is wrapped by every *TargetError.
var ErrInvalidTarget = errors.New("probe: invalid target")

// TargetError reports a target field that fails validation.
type TargetError struct {
	ID     string // the target's ID, possibly empty
	Field  string // the Target field at fault, e.g. "Timeout"
	Reason string // what is wrong with it
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("probe: target %q: %s %s", e.ID, e.Field, e.Reason)
}

// Unwrap returns ErrInvalidTarget.
func (e *TargetError) Unwrap() error { return ErrInvalidTarget }

// Validate reports the first field of t that is missing or invalid, as a
// *TargetError.
func (t Target) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &TargetError{ID: t.ID, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case t.ID == "":
		return bad("ID", "is required")
	case t.Kind < TCP || t.Kind > GRPC:
		return bad("Kind", "must be tcp, http or grpc, not %s", t.Kind)
	case !t.Addr.IsValid():
		return bad("Addr", "is required")
	case t.Addr.Addr().IsUnspecified():
		return bad("Addr", "%s is unspecified", t.Addr.Addr())
	case t.Addr.Port() == 0:
		return bad("Addr", "%s has port 0", t.Addr)
	case t.Interval < MinInterval:
		return bad("Interval", "%v is below the minimum %v", t.Interval, MinInterval)
	case t.Timeout <= 0:
		return bad("Timeout", "must be positive, not %v", t.Timeout)
	case t.Timeout > t.Interval:
		return bad("Timeout", "%v exceeds Interval %v", t.Timeout, t.Interval)
	case t.Kind != HTTP && t.Path != "":
		return bad("Path", "is only for http checks, not %s", t.Kind)
	case t.Kind != GRPC && t.Service != "":
		return bad("Service", "is only for grpc checks, not %s", t.Kind)
	case len(t.Service) > 255:
		return bad("Service", "is longer than 255 bytes")
	}
	if t.Kind == HTTP {
		if _, err := requestURI(t.Path); err != nil {
			return bad("Path", "%q %v", t.Path, err)
		}
	}
	return nil
}

// requestURI checks an HTTP target's Path and returns the URL it asks for,
// without host. Empty means "/".
func requestURI(p string) (*url.URL, error) {
	if p == "" {
		p = "/"
	}
	if len(p) > 2048 {
		return nil, errors.New("is longer than 2048 bytes")
	}
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return nil, errors.New(`must start with a single "/"`)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
		return nil, errors.New("contains a space or control character")
	}
	if strings.Contains(p, "#") {
		return nil, errors.New("has a fragment")
	}
	u, err := url.ParseRequestURI(p)
	if err != nil {
		return nil, errors.New("does not parse as a request path")
	}
	if u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return nil, errors.New("may hold only a path and a query")
	}
	return u, nil
}
