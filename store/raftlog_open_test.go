package store_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
)

// lockedBuffer is written by raft's goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(b.buf.Bytes()))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("decoding the log: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// TestRaftLogsThroughStoreLogger: raft's records reach the store's
// logger as structured records (component=raft, fields as attributes) at
// the logger's handler level.
func TestRaftLogsThroughStoreLogger(t *testing.T) {
	for _, tc := range []struct {
		level     slog.Level
		wantDebug bool
	}{{slog.LevelInfo, false}, {slog.LevelDebug, true}} {
		t.Run("handler at "+tc.level.String(), func(t *testing.T) {
			var buf lockedBuffer
			logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
			n := storetest.Single(t, store.Config{Logger: logger})
			// The election logged before Single saw a ready leader.
			var leader, debug bool
			for _, r := range buf.records(t) {
				if r["component"] != "raft" {
					continue
				}
				if r["msg"] == "entering leader state" {
					s, _ := r["leader"].(string)
					leader = r["level"] == "INFO" && strings.Contains(s, "[Leader]")
				}
				debug = debug || r["level"] == "DEBUG"
			}
			if !leader {
				t.Errorf("no Info record \"entering leader state\" with a leader attribute naming the leader (node %s)", n.NodeID())
			}
			if debug != tc.wantDebug {
				t.Errorf("raft Debug records: %t, want %t", debug, tc.wantDebug)
			}
		})
	}
}
