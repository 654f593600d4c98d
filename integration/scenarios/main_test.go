package scenarios

import (
	"os"
	"testing"

	"github.com/cairn-sd/cairn/integration"
)

func TestMain(m *testing.M) {
	code := m.Run()
	integration.RemoveBinary()
	RemoveFleetBinary()
	os.Exit(code)
}
