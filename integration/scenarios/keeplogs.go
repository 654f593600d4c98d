package scenarios

import (
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// keepLogs copies every *.log of the test's temporary dirs (dir is one)
// to EnvLogs/<test name>/, keeping their paths, when EnvLogs is set: a
// scenario's data dirs are removed when it ends, and a failed row is
// read in its servers' logs.
func keepLogs(t testing.TB, dir string) {
	dir = filepath.Dir(dir) // the root of t.TempDir's dirs
	root := os.Getenv(EnvLogs)
	if root == "" {
		return
	}
	dst := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Logf("keeping the logs in %s: %v", dst, err)
		return
	}
	t.Logf("the region's logs are kept in %s", dst)
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// EnvDebugPort, set to a port number P, gives server i (from 1)
// --debug-addr 127.0.0.1:P+i: Go's profiles of a scenario's servers
// while it runs (go tool pprof http://127.0.0.1:P+i/debug/pprof/profile).
const EnvDebugPort = "CAIRN_SCENARIO_DEBUG_PORT"

// debugArgs are server i's --debug-addr under EnvDebugPort.
func debugArgs(i int) []string {
	p, err := strconv.Atoi(os.Getenv(EnvDebugPort))
	if err != nil || p <= 0 {
		return nil
	}
	return []string{"--debug-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i))}
}
