package linearize

import (
	"testing"

	"go.uber.org/goleak"
)

// porcupine checks partitions on goroutines of its own: none may outlive
// a check.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
