//go:build unix

package durable

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// The child process's instructions: where to crash, and the target.
const (
	crashAtEnv   = "DURABLE_TEST_CRASH_AT"
	crashPathEnv = "DURABLE_TEST_CRASH_PATH"
)

// duringWrite is the crash point in the middle of writing the content,
// half of which is written.
const duringWrite = "mid-write"

// crashContents are the old and the new content: of different lengths
// and patterns, and long enough to take several write calls, so that a
// torn file would be told from either.
func crashContents() (oldData, newData []byte) {
	return bytes.Repeat([]byte("old content\n"), 50_000), bytes.Repeat([]byte("NEW\n"), 100_000)
}

// TestCrash kills a process writing a file at each point of the write,
// and checks what a process started afterwards finds: the old content
// when the kill came before the rename (nothing, if there was no old
// file), the new content after it, and never a mix, a truncation or a
// missing file. It then checks that the next write removes the
// temporary file the dead one left.
//
// The test re-executes its own binary, which writes the file and sends
// itself SIGKILL from the write's step hook: no deferred cleanup, no
// Close, no buffered data flushed by the runtime.
//
// What this does not test: a power cut. The kernel's page cache survives
// the death of a process, so the killed writer's data and rename are
// visible whether they were fsynced or not. The test shows atomicity
// against a crash of the process; that the fsyncs are done, and in the
// right order (the file before the rename, the directory after it), is
// checked through the same hook by TestWriteOrder, not by cutting power.
func TestCrash(t *testing.T) {
	if at := os.Getenv(crashAtEnv); at != "" {
		crashChild(t, at, os.Getenv(crashPathEnv))
		return
	}
	oldData, newData := crashContents()
	points := []struct {
		name    string
		at      string // a step, or duringWrite
		renamed bool   // the kill comes after the rename
	}{
		{"during write", duringWrite, false},
		{"after write", string(stepWrite), false},
		{"after file fsync", string(stepSync), false},
		{"after close", string(stepClose), false},
		{"after rename", string(stepRename), true},
		{"after directory fsync", string(stepSyncDir), true},
	}
	for _, hadOld := range []bool{true, false} {
		for _, p := range points {
			name := p.name
			if !hadOld {
				name = "first write " + name
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "target")
				if hadOld {
					if err := WriteFile(path, oldData, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				runCrashChild(t, p.at, path)

				got, err := os.ReadFile(path)
				switch {
				case p.renamed && (err != nil || !bytes.Equal(got, newData)):
					t.Errorf("killed after the rename: target holds %s; want the new content", describe(got, err, oldData, newData))
				case !p.renamed && hadOld && (err != nil || !bytes.Equal(got, oldData)):
					t.Errorf("killed before the rename: target holds %s; want the old content", describe(got, err, oldData, newData))
				case !p.renamed && !hadOld && !errors.Is(err, os.ErrNotExist):
					t.Errorf("killed before the first rename: target holds %s; want no file", describe(got, err, oldData, newData))
				}
				temps := 0
				for _, n := range names(t, dir) {
					if isTemp(n, ".target"+tempInfix) {
						temps++
					}
				}
				want := 1 // the dead write's
				if p.renamed {
					want = 0
				}
				if temps != want {
					t.Errorf("%d temporary files after the kill; want %d", temps, want)
				}

				// The next write cleans up after the dead one.
				if err := WriteFile(path, []byte("next"), 0o600); err != nil {
					t.Fatal(err)
				}
				if got := names(t, dir); len(got) != 1 || got[0] != "target" {
					t.Errorf("after the next write the directory holds %q; want only the target", got)
				}
				if got := content(t, path); got != "next" {
					t.Errorf("after the next write the target holds %q; want %q", got, "next")
				}
			})
		}
	}
}

// runCrashChild runs this test binary as a child that writes path and
// is killed at at, and checks that it died of SIGKILL: a child that
// exits by itself never reached the point.
func runCrashChild(t *testing.T, at, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashAtEnv+"="+at, crashPathEnv+"="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The child blocks reading its stdin once it has sent the signal (see
	// crashChild); the pipe is closed by Wait, after the child's death.
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v; want death by SIGKILL\n%s", err, out.Bytes())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v; want death by SIGKILL\n%s", err, out.Bytes())
	}
}

// crashChild is the child's side: write the new content to path and
// die at at.
func crashChild(t *testing.T, at, path string) {
	die := func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		// SIGKILL to oneself takes effect before kill returns to this
		// thread; should it not, stay put rather than run the next step.
		_, _ = io.Copy(io.Discard, os.Stdin)
		t.Fatal("still alive after SIGKILL")
	}
	_, newData := crashContents()
	err := write(path, 0o600, func(w io.Writer) error {
		if at == duringWrite {
			if _, err := w.Write(newData[:len(newData)/2]); err != nil {
				return err
			}
			die()
		}
		_, err := w.Write(newData)
		return err
	}, func(s step) error {
		if string(s) == at {
			die()
		}
		return nil
	})
	t.Fatalf("the write returned (%v) without reaching %q", err, at)
}

// describe says what a file holds, for a failure message.
func describe(got []byte, err error, oldData, newData []byte) string {
	switch {
	case err != nil:
		return fmt.Sprintf("nothing (%v)", err)
	case bytes.Equal(got, oldData):
		return "the old content"
	case bytes.Equal(got, newData):
		return "the new content"
	}
	return fmt.Sprintf("%d bytes that are neither the old content nor the new", len(got))
}
