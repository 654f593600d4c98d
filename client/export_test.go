package client

import (
	"testing"
	"time"
)

// StretchBackoff makes every backoff wait uniform in [0, d) until t ends,
// so that a test can tell a wait cut short by ctx from one that ran out.
func StretchBackoff(t *testing.T, d time.Duration) {
	base, limit := retryBase, retryCap
	retryBase, retryCap = d, d
	t.Cleanup(func() { retryBase, retryCap = base, limit })
}
