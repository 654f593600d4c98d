package store

import (
	"errors"
	"fmt"

	"github.com/cairn-sd/cairn/wire"
)

func invalid(field, format string, args ...any) error {
	return &wire.FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrNotFound is an unknown service or instance.
	ErrNotFound = errors.New("store: not found")
	// ErrFenced is a mutation carrying an incarnation other than the
	// instance's current one; nothing was changed.
	ErrFenced = errors.New("store: fenced")
	// ErrBudget is a drain or a deregistration the service's disruption
	// budget does not allow; nothing was changed.
	ErrBudget = errors.New("store: disruption budget exhausted")
	// ErrNotLeader means this node cannot accept writes now.
	ErrNotLeader = errors.New("store: not leader")
	// ErrNoLeader means no leader is known: the cluster has lost quorum
	// or is electing.
	ErrNoLeader = errors.New("store: no leader")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store: closed")
)
