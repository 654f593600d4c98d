package dnsserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every server a test starts stops its readers, its TCP server and its
// parked queries before Run returns; nothing may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
