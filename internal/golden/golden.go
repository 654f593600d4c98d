// Package golden pins the bytes a test makes against a file under the
// test's testdata/: the formats that must not change between versions
// (the API's JSON, raft entries, snapshots, the table file, an agent's
// view). `go test -update` rewrites the files from what the code makes
// today; the diff then shows what changed.
//
// For tests only (cmd/deps_test.go keeps it out of production code). It
// imports no cairn package. The -update flag is the test binary's.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from what the code makes today")

// TB is what Check needs of a *testing.T.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Updating reports whether this run rewrites the golden files.
func Updating() bool { return *update }

// Check compares got with testdata/name and returns the file's bytes;
// with -update it writes got there first. A difference fails the test,
// naming the file and showing both.
func Check(t TB, name string, got []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatalf("%v", err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("%v", err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed (run with -update if that is meant); got\n%s\nwant\n%s", path, got, want)
	}
	return want
}
