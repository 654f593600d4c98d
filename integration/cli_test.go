package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// cairnCLI runs the cairn binary as a client of node n and returns its
// standard output and error, and its exit code (-1: it did not run to
// an exit).
func cairnCLI(ctx context.Context, t *testing.T, n *Node, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd, err := n.CLI(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		code = exit.ExitCode()
	default:
		code = -1
	}
	return out.String(), errs.String(), code
}

// runCLI runs the cairn binary as a client of node n and returns its
// standard output; a command that fails fails the test.
func runCLI(ctx context.Context, t *testing.T, n *Node, args ...string) []byte {
	t.Helper()
	stdout, stderr, code := cairnCLI(ctx, t, n, args...)
	if code != 0 {
		t.Fatalf("cairn %s: exit code %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, stdout, stderr)
	}
	return []byte(stdout)
}

// runCLIResult runs the cairn binary as a client of node n and returns
// its output (standard output, then error) and, for a command that ran
// and failed (a refusal), an error saying its exit code; a command that
// could not run fails the test.
func runCLIResult(ctx context.Context, t *testing.T, n *Node, args ...string) (string, error) {
	t.Helper()
	stdout, stderr, code := cairnCLI(ctx, t, n, args...)
	switch code {
	case 0:
		return stdout + stderr, nil
	case -1:
		t.Fatalf("cairn %s did not run to an exit\nstdout: %s\nstderr: %s", strings.Join(args, " "), stdout, stderr)
	}
	return stdout + stderr, fmt.Errorf("cairn %s: exit code %d", strings.Join(args, " "), code)
}
