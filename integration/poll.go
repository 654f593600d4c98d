package integration

import (
	"errors"
	"fmt"
	"time"
)

// stopPolling makes Poll give up at once.
type stopPolling struct{ err error }

func (s *stopPolling) Error() string { return s.err.Error() }

// StopPolling wraps err so that Poll returns it at once instead of
// calling f again: for an error no retry can mend (a cancelled context,
// a refusal).
func StopPolling(err error) error { return &stopPolling{err} }

// Poll calls f every interval until it returns nil, or until timeout; the
// error then carries f's last error, the last state observed.
func Poll(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		var stop *stopPolling
		if errors.As(err, &stop) {
			return stop.err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("still failing after %s: %w", timeout, err)
		}
		<-t.C
	}
}
