package nodeid

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

func TestLoadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	id, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.CheckLabel("node_id", id); err != nil {
		t.Errorf("generated id %q: %v", id, err)
	}
	again, err := LoadOrCreate(dir)
	if err != nil || again != id {
		t.Errorf("second load: %q, %v; want %q", again, err, id)
	}
	if err := os.WriteFile(filepath.Join(dir, File), []byte("Not_A_Label\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); !errors.Is(err, wire.ErrInvalid) {
		t.Errorf("bad id file: error %v, want ErrInvalid", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("data dir holds %d entries, want only %s (no temporary files left)", len(entries), File)
	}
}
