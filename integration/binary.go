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
	// EnvAgentBin names a prebuilt cairn-agent binary to use instead of
	// building one.
	EnvAgentBin = "CAIRN_AGENT_BIN"
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

// RemoveBinary deletes the binaries Binary and AgentBinary built (never
// one named by $CAIRN_BIN or $CAIRN_AGENT_BIN). Call it once every
// cluster is closed, from TestMain.
func RemoveBinary() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	if agentBuild.dir != "" {
		os.RemoveAll(agentBuild.dir)
	}
}

var agentBuild struct {
	once sync.Once
	dir  string // removed by RemoveBinary; empty when EnvAgentBin was used
	bin  string
	err  error
}

// AgentBinary returns the path of the cairn-agent binary (`cairn agent`
// without the server linked): $CAIRN_AGENT_BIN if set, otherwise one
// built as `make build` builds it (no cgo, no urfave/cli doc writers),
// once per process, with -race when $CAIRN_BIN_RACE is 1.
func AgentBinary() (string, error) {
	agentBuild.once.Do(func() {
		if p := os.Getenv(EnvAgentBin); p != "" {
			abs, err := filepath.Abs(p)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err != nil {
				agentBuild.err = fmt.Errorf("$%s=%q: %w", EnvAgentBin, p, err)
				return
			}
			agentBuild.bin = abs
			return
		}
		dir, err := os.MkdirTemp("", "cairn-integration-agent-bin-")
		if err != nil {
			agentBuild.err = err
			return
		}
		agentBuild.dir = dir
		bin := filepath.Join(dir, "cairn-agent")
		args := []string{"build", "-o", bin, "-tags", "urfave_cli_no_docs"}
		cmd := exec.Command("go")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if os.Getenv(EnvBinRace) == "1" {
			// The race detector needs cgo.
			args = append(args, "-race")
			cmd.Env = os.Environ()
		}
		cmd.Args = append(cmd.Args, append(args, "github.com/cairn-sd/cairn/cmd/cairn-agent")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			agentBuild.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		agentBuild.bin = bin
	})
	return agentBuild.bin, agentBuild.err
}
