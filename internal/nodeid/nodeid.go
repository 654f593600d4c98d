// Package nodeid keeps a server's identity in its data dir: the id a
// server gets when --node-id is not given, made once at random and read
// back at every start, so that several servers on one host never collide
// and a restarted one is the same raft voter it was.
//
// Imports: the label rule and safe file writes. It is read once, at a
// server's start.
package nodeid

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairn-sd/cairn/internal/durable"
	"github.com/cairn-sd/cairn/wire"
)

// File is the file in the data dir that keeps a node's generated id.
const File = "node-id"

// LoadOrCreate returns the node id kept in dir, creating a random one
// on first use, so that several nodes on one host never collide and a
// restarted node keeps its identity.
func LoadOrCreate(dir string) (string, error) {
	path := filepath.Join(dir, File)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := wire.CheckLabel("node_id", id); err != nil {
			return "", fmt.Errorf("nodeid: %s: %w", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("nodeid: reading node id: %w", err)
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := "node-" + hex.EncodeToString(r[:])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("nodeid: creating data dir %q: %w", dir, err)
	}
	if err := durable.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("nodeid: keeping node id: %w", err)
	}
	return id, nil
}
