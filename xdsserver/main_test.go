package xdsserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every stream's goroutines, and the real xDS clients' of the tests, end
// with their tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
