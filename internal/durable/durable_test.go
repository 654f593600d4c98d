package durable

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// allSteps are a write's steps after the temporary file exists, in the
// order a write must take them.
func allSteps() []step {
	return []step{stepWrite, stepSync, stepClose, stepRename, stepSyncDir}
}

// renamedBy reports whether the target holds the new content once s is
// done.
func renamedBy(s step) bool { return s == stepRename || s == stepSyncDir }

// names lists the directory's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// content is the file at path, or "<missing>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteFile(t *testing.T) {
	t.Run("creates the file", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "node-id")
		if err := WriteFile(path, []byte("n1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := content(t, path); got != "n1\n" {
			t.Errorf("content %q; want %q", got, "n1\n")
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// 0600 is kept by any sensible umask (which only clears bits).
		if fi.Mode() != 0o600 {
			t.Errorf("mode %v; want %v", fi.Mode(), os.FileMode(0o600))
		}
		if got := names(t, dir); !slices.Equal(got, []string{"node-id"}) {
			t.Errorf("directory holds %q; want only the target", got)
		}
	})
	t.Run("replaces the file", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "addrs.json")
		for _, c := range []string{"first, and longer than the second", "second", ""} {
			if err := WriteFile(path, []byte(c), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := content(t, path); got != c {
				t.Errorf("content %q; want %q", got, c)
			}
		}
		if got := names(t, dir); !slices.Equal(got, []string{"addrs.json"}) {
			t.Errorf("directory holds %q; want only the target", got)
		}
	})
	t.Run("streams through Write", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "table")
		err := Write(path, 0o600, func(w io.Writer) error {
			for _, s := range []string{"head\n", "body"} {
				if _, err := io.WriteString(w, s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := content(t, path); got != "head\nbody" {
			t.Errorf("content %q; want %q", got, "head\nbody")
		}
	})
}

// TestWriteOrder: the file is fsynced before the rename and the
// directory after it, and the target changes at the rename and nowhere
// else. A process kill cannot show that the fsyncs are where they must
// be (see TestCrash); their order is checked here instead.
func TestWriteOrder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []step
	err := write(path, 0o600, func(w io.Writer) error {
		_, err := io.WriteString(w, "new")
		return err
	}, func(s step) error {
		got = append(got, s)
		want := "old"
		if renamedBy(s) {
			want = "new"
		}
		if c := content(t, path); c != want {
			t.Errorf("after %s: target holds %q; want %q", s, c, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, allSteps()) {
		t.Errorf("steps %q; want %q", got, allSteps())
	}
}

// TestWriteFails: a failure at any step leaves no temporary file, names
// the path and the step, and leaves the target untouched unless the
// rename was done.
func TestWriteFails(t *testing.T) {
	injected := errors.New("injected")
	for _, at := range allSteps() {
		t.Run(string(at), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "target")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := write(path, 0o600, func(w io.Writer) error {
				_, err := io.WriteString(w, "new")
				return err
			}, func(s step) error {
				if s == at {
					return injected
				}
				return nil
			})
			if !errors.Is(err, injected) {
				t.Fatalf("error %v; want the injected one", err)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, string(at)) {
				t.Errorf("error %q names neither %q nor %q", msg, path, at)
			}
			want := "old"
			if renamedBy(at) {
				want = "new"
			}
			if got := content(t, path); got != want {
				t.Errorf("target holds %q; want %q", got, want)
			}
			if got := names(t, dir); !slices.Equal(got, []string{"target"}) {
				t.Errorf("directory holds %q; want only the target", got)
			}
		})
	}

	// Real failures, where the operating system or fill refuses.
	t.Run("fill fails", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "target")
		if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := Write(path, 0o600, func(w io.Writer) error {
			if _, err := io.WriteString(w, "half"); err != nil {
				return err
			}
			return injected
		})
		if !errors.Is(err, injected) || !strings.Contains(err.Error(), `writing "`+path+`"`) {
			t.Errorf("error %v; want the injected one, writing %q", err, path)
		}
		if got := content(t, path); got != "old" {
			t.Errorf("target holds %q; want %q", got, "old")
		}
		if got := names(t, dir); !slices.Equal(got, []string{"target"}) {
			t.Errorf("directory holds %q; want only the target", got)
		}
	})
	t.Run("fill panics", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "target")
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not reach the caller")
				}
			}()
			_ = Write(path, 0o600, func(io.Writer) error { panic("fill") })
		}()
		if got := names(t, dir); len(got) != 0 {
			t.Errorf("directory holds %q; want nothing", got)
		}
	})
	t.Run("no directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "missing", "target")
		err := WriteFile(path, []byte("new"), 0o600)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), string(stepCreate)+` "`+path+`"`) {
			t.Errorf("error %v; want not-exist, %s %q", err, stepCreate, path)
		}
	})
	t.Run("target is a directory", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "target")
		if err := os.MkdirAll(filepath.Join(path, "inside"), 0o700); err != nil {
			t.Fatal(err)
		}
		err := WriteFile(path, []byte("new"), 0o600)
		if err == nil || !strings.Contains(err.Error(), string(stepRename)+` "`+path+`"`) {
			t.Errorf("error %v; want %s %q", err, stepRename, path)
		}
		if got := names(t, dir); !slices.Equal(got, []string{"target"}) {
			t.Errorf("directory holds %q; want only the target", got)
		}
	})
}

// TestLeftovers: a write removes the temporary files of earlier writes
// to its target, and only those.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	keep := []string{
		".target.tmp-x.tmp-0123456789abcdef", // a temporary file of "target.tmp-x"
		".target.tmp-0123",                   // too short to be one of ours
		".target.tmp-0123456789abcdeg",       // not hex
		".other.tmp-0123456789abcdef",        // another target's
		"target",
	}
	stale := []string{".target.tmp-0123456789abcdef", ".target.tmp-fedcba9876543210"}
	for _, n := range append(slices.Clone(keep), stale...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("stale"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFile(filepath.Join(dir, "target"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keep)
	if got := names(t, dir); !slices.Equal(got, keep) {
		t.Errorf("directory holds %q; want %q", got, keep)
	}
}

// A temporary file's name has the shape isTemp recognises.
func TestTempName(t *testing.T) {
	dir := t.TempDir()
	f, err := createTemp(dir, ".target"+tempInfix, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if name := filepath.Base(f.Name()); !isTemp(name, ".target"+tempInfix) {
		t.Errorf("temporary file %q is not recognised as one", name)
	}
	if filepath.Dir(f.Name()) != dir {
		t.Errorf("temporary file %q is not in %q", f.Name(), dir)
	}
}
