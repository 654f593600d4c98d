package durable

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// WriteFile replaces the content of path with data, atomically and
// durably (see the package comment). perm, less the umask, is the new
// file's mode. The error names path and the step that failed.
//
// Calls for different paths may run concurrently; calls for one path
// must not overlap, since each removes the temporary files it finds
// for its path.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, nil)
}

// Write is WriteFile, under the same rules, for content produced piece
// by piece: fill writes the new content into w, which is the temporary
// file itself, without a buffer (so fill should write in large pieces,
// or buffer and flush itself). fill must not keep w after it returns.
// An error from fill abandons the write, leaving the target untouched,
// and is wrapped in the returned error.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) error {
	return write(path, perm, fill, nil)
}

// step names a step of a write, as its errors say it.
type step string

const (
	stepCreate  step = "creating a temporary file for"
	stepWrite   step = "writing"
	stepSync    step = "syncing"
	stepClose   step = "closing"
	stepRename  step = "renaming over"
	stepSyncDir step = "syncing the directory of"
)

// tempInfix and tempRandom shape a temporary file's name:
// "." + base + tempInfix + tempRandom hex digits. The fixed length of the
// random part is what lets a write recognise the leftovers of its own
// target and not those of a target whose name merely starts the same.
const (
	tempInfix  = ".tmp-"
	tempRandom = 16
)

// write is Write, calling after once each step has succeeded, with the
// step; an error from after fails the write as if the step had failed.
// Tests pass an after that records the order of the steps, kills the
// process, or injects a failure; WriteFile and Write pass nil.
func write(path string, perm os.FileMode, fill func(io.Writer) error, after func(step) error) error {
	if after == nil {
		after = func(step) error { return nil }
	}
	fail := func(s step, err error) error {
		return fmt.Errorf("durable: %s %q: %w", s, path, err)
	}
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)+tempInfix
	removeLeftovers(dir, prefix)
	f, err := createTemp(dir, prefix, perm)
	if err != nil {
		return fail(stepCreate, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		// Also on a panic in fill. After the rename there is no temporary
		// file; closing twice is harmless.
		if !renamed {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	steps := []struct {
		name step
		do   func() error
	}{
		{stepWrite, func() error { return fill(f) }},
		{stepSync, f.Sync},
		{stepClose, f.Close},
		{stepRename, func() error {
			err := os.Rename(tmp, path)
			renamed = err == nil
			return err
		}},
		{stepSyncDir, func() error { return syncDir(dir) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fail(s.name, err)
		}
		if err := after(s.name); err != nil {
			return fail(s.name, err)
		}
	}
	return nil
}

// createTemp creates a new file in dir named prefix and tempRandom
// random hex digits, with perm less the umask. It is os.CreateTemp but
// for the mode, which os.CreateTemp fixes at 0600, and the fixed length
// of the random part.
func createTemp(dir, prefix string, perm os.FileMode) (*os.File, error) {
	// With 64 random bits a clash means another file of exactly this
	// shape; a few tries only guard against that rarity.
	const tries = 10
	for range tries {
		name := filepath.Join(dir, fmt.Sprintf("%s%0*x", prefix, tempRandom, rand.Uint64()))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no unused name for a temporary file in %q after %d tries", dir, tries)
}

// removeLeftovers removes the temporary files in dir that earlier writes
// with prefix did not rename, because the process died first. It is best
// effort and reports nothing: a leftover never affects the target, and
// failing the write for one would turn litter into lost data. A
// directory that cannot be listed keeps its leftovers; the write goes on,
// and fails at its own steps if the directory is unusable.
func removeLeftovers(dir, prefix string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if isTemp(e.Name(), prefix) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// isTemp reports whether name is that of a temporary file made by
// createTemp with prefix.
func isTemp(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) != tempRandom {
		return false
	}
	return strings.IndexFunc(rest, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f')
	}) < 0
}

// syncDir fsyncs the directory dir, which puts on disk the names it
// holds: the rename of the temporary file over the target.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
