package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Environment variables the harness reads.
const (
	// EnvBin names a prebuilt cairn binary to use instead of building one.
	EnvBin = "CAIRN_BIN"
	// EnvBinRace, set to 1, builds the binary with -race, so that data
	// races in the server fail the server (and the test) too.
	EnvBinRace = "CAIRN_BIN_RACE"
	// EnvArtifacts names a directory where StartCluster copies every
	// node's log when a test ends, under the test's name.
	EnvArtifacts = "CAIRN_TEST_ARTIFACTS"
)

var build struct {
	once sync.Once
	dir  string // removed by RemoveBinary; empty when EnvBin was used
	bin  string
	err  error
}

// Binary returns the path of the cairn binary: $CAIRN_BIN if set,
// otherwise one built with `go build` into a temporary directory, once per
// process; that needs the go command in PATH and a working directory
// inside the module.
func Binary() (string, error) {
	build.once.Do(func() {
		if p := os.Getenv(EnvBin); p != "" {
			abs, err := filepath.Abs(p)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err != nil {
				build.err = fmt.Errorf("$%s=%q: %w", EnvBin, p, err)
				return
			}
			build.bin = abs
			return
		}
		dir, err := os.MkdirTemp("", "cairn-integration-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.dir = dir
		bin := filepath.Join(dir, "cairn")
		args := []string{"build", "-o", bin}
		if os.Getenv(EnvBinRace) == "1" {
			args = append(args, "-race")
		}
		args = append(args, "github.com/cairn-sd/cairn/cmd/cairn")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		build.bin = bin
	})
	return build.bin, build.err
}

// RemoveBinary deletes the binary Binary built (never one named by
// $CAIRN_BIN). Call it once every cluster is closed, from TestMain.
func RemoveBinary() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}
