package main

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestDrawUnchanged: the plot of three sample runs is pixel for pixel
// the one xdsplot drew before its primitives moved to internal/pngplot.
func TestDrawUnchanged(t *testing.T) {
	var runs []run
	for _, f := range []string{"testdata/a.txt", "testdata/b.txt", "testdata/c.txt"} {
		r, err := read(f)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	// The pixels, not the PNG bytes: the encoder may change with Go.
	sum := sha256.Sum256(draw(runs, "steady (100%) test-1,2").Pix)
	const want = "cb433a20e32861dddef6fb7af78c6323ab16d2b5d35f7ff2885e189c44bce6c1"
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("the plot's pixels' SHA-256 is %s, want %s", got, want)
	}
}
