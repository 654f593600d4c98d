package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// jsonRecords returns a raftLogger named "raft" writing JSON to a buffer
// through a handler at level, and a func that decodes what it wrote so
// far, one map per record.
func jsonRecords(t *testing.T, level slog.Level, source bool) (*raftLogger, func() []map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level, AddSource: source})
	l := newRaftLogger(slog.New(h), "raft", nil)
	return l, func() []map[string]any {
		t.Helper()
		var out []map[string]any
		dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("decoding %q: %v", buf.String(), err)
			}
			out = append(out, m)
		}
		return out
	}
}

// one returns the only record, failing the test if there is not one.
func one(t *testing.T, records []map[string]any) map[string]any {
	t.Helper()
	if len(records) != 1 {
		t.Fatalf("%d records %v, want 1", len(records), records)
	}
	return records[0]
}

// stringer renders through String, as raft's *Raft does.
type stringer struct{ addr string }

func (s *stringer) String() string { return "Node at " + s.addr }

func TestRaftLoggerFieldsAreAttributes(t *testing.T) {
	l, records := jsonRecords(t, slog.LevelInfo, false)
	l.Info("entering follower state",
		"term", uint64(7),
		"leader-address", "10.0.0.1:8482",
		"error", errors.New("connection refused"),
		"servers", hclog.Fmt("%d of %d", 2, 3),
		"follower", &stringer{"10.0.0.2:8482"},
		"took", 1500*time.Millisecond,
		"flags", hclog.Hex(255))
	got := one(t, records())
	want := map[string]any{
		"level": "INFO", "msg": "entering follower state", "component": "raft",
		"term": 7.0, "leader-address": "10.0.0.1:8482", "error": "connection refused",
		"servers": "2 of 3", "follower": "Node at 10.0.0.2:8482",
		"took": float64(1500 * time.Millisecond), "flags": "0xff",
	}
	delete(got, "time")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("record\n%v\nwant\n%v", got, want)
	}
}

func TestRaftLoggerLevels(t *testing.T) {
	l, records := jsonRecords(t, levelTrace, false)
	for _, tc := range []struct {
		name string
		log  func(msg string)
		want string // slog's name of the level; "" for no record
	}{
		{"Trace", func(m string) { l.Trace(m) }, "DEBUG-4"},
		{"Debug", func(m string) { l.Debug(m) }, "DEBUG"},
		{"Info", func(m string) { l.Info(m) }, "INFO"},
		{"Warn", func(m string) { l.Warn(m) }, "WARN"},
		{"Error", func(m string) { l.Error(m) }, "ERROR"},
		{"Log(Warn)", func(m string) { l.Log(hclog.Warn, m) }, "WARN"},
		{"Log(NoLevel) is Info", func(m string) { l.Log(hclog.NoLevel, m) }, "INFO"},
		{"Log(Off) logs nothing", func(m string) { l.Log(hclog.Off, m) }, ""},
	} {
		tc.log(tc.name)
	}
	got := map[string]string{}
	for _, r := range records() {
		got[r["msg"].(string)] = r["level"].(string)
	}
	want := map[string]string{
		"Trace": "DEBUG-4", "Debug": "DEBUG", "Info": "INFO", "Warn": "WARN", "Error": "ERROR",
		"Log(Warn)": "WARN", "Log(NoLevel) is Info": "INFO",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("levels by message %v, want %v", got, want)
	}
}

// TestRaftLoggerFollowsHandlerLevel: the handler's level, not the
// logger, decides what is logged and what the Is* guards answer.
func TestRaftLoggerFollowsHandlerLevel(t *testing.T) {
	t.Run("handler at info drops debug", func(t *testing.T) {
		l, records := jsonRecords(t, slog.LevelInfo, false)
		l.SetLevel(hclog.Trace) // documented no-op
		l.Debug("dropped")
		l.Info("kept")
		if r := one(t, records()); r["msg"] != "kept" {
			t.Errorf("record %v, want the Info one", r)
		}
		if l.IsDebug() || !l.IsInfo() || !l.IsError() || l.GetLevel() != hclog.Info {
			t.Errorf("IsDebug %t, IsInfo %t, IsError %t, GetLevel %s; want false, true, true, info",
				l.IsDebug(), l.IsInfo(), l.IsError(), l.GetLevel())
		}
	})
	t.Run("handler at debug keeps debug, drops trace", func(t *testing.T) {
		l, records := jsonRecords(t, slog.LevelDebug, false)
		l.Trace("dropped")
		l.Debug("kept", "index", 3)
		if r := one(t, records()); r["msg"] != "kept" || r["level"] != "DEBUG" {
			t.Errorf("record %v, want the Debug one", r)
		}
		if l.IsTrace() || !l.IsDebug() || l.GetLevel() != hclog.Debug {
			t.Errorf("IsTrace %t, IsDebug %t, GetLevel %s; want false, true, debug", l.IsTrace(), l.IsDebug(), l.GetLevel())
		}
	})
	t.Run("handler above error takes nothing", func(t *testing.T) {
		l, records := jsonRecords(t, slog.LevelError+4, false)
		l.Error("dropped")
		if n := len(records()); n != 0 || l.IsError() || l.GetLevel() != hclog.Off {
			t.Errorf("%d records, IsError %t, GetLevel %s; want 0, false, off", n, l.IsError(), l.GetLevel())
		}
	})
}

func TestRaftLoggerNamedAndWith(t *testing.T) {
	l, records := jsonRecords(t, slog.LevelInfo, false)
	snap := l.With("id", "1-2-3", "term", 4).Named("snapshot").With("term", 5, "size", 100)
	if n := snap.Name(); n != "raft.snapshot" {
		t.Errorf("Name %q, want raft.snapshot", n)
	}
	if got, want := snap.ImpliedArgs(), []any{"id", "1-2-3", "term", 5, "size", 100}; !reflect.DeepEqual(got, want) {
		t.Errorf("ImpliedArgs %v, want %v (a key given again keeps its place, with the new value)", got, want)
	}
	snap.Info("persisting", "size", 200)
	other := snap.ResetNamed("net")
	other.Info("dialing")
	l.Info("parent")
	unnamed := l.ResetNamed("")
	unnamed.Info("unnamed")

	rs := records()
	if len(rs) != 4 {
		t.Fatalf("%d records %v, want 4", len(rs), rs)
	}
	for i, want := range []map[string]any{
		{"msg": "persisting", "component": "raft.snapshot", "id": "1-2-3", "term": 5.0, "size": 200.0},
		{"msg": "dialing", "component": "net", "id": "1-2-3", "term": 5.0, "size": 100.0},
		{"msg": "parent", "component": "raft"},
		{"msg": "unnamed"},
	} {
		got := rs[i]
		delete(got, "time")
		delete(got, "level")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d\n%v\nwant\n%v", i, got, want)
		}
	}
	if l.Name() != "raft" || l.ImpliedArgs() != nil {
		t.Errorf("parent changed: Name %q, ImpliedArgs %v", l.Name(), l.ImpliedArgs())
	}
}

func TestRaftLoggerOddArgument(t *testing.T) {
	l, records := jsonRecords(t, slog.LevelInfo, false)
	l.Info("call", "peer", "n2", "dangling")
	l.With("node", "n1", "orphan").Info("with")
	rs := records()
	if len(rs) != 2 {
		t.Fatalf("%d records %v, want 2", len(rs), rs)
	}
	if rs[0]["peer"] != "n2" || rs[0][hclog.MissingKey] != "dangling" {
		t.Errorf("Info record %v, want peer=n2 and %s=dangling", rs[0], hclog.MissingKey)
	}
	if rs[1]["node"] != "n1" || rs[1][hclog.MissingKey] != "orphan" {
		t.Errorf("With record %v, want node=n1 and %s=orphan", rs[1], hclog.MissingKey)
	}
}

func TestRaftLoggerStandardLogger(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      *hclog.StandardLoggerOptions
		line      string
		wantLevel string
		wantMsg   string
	}{
		{"plain is info", nil, "[WARN] pool full", "INFO", "[WARN] pool full"},
		{"inferred", &hclog.StandardLoggerOptions{InferLevels: true}, "[ERR] accept failed", "ERROR", "accept failed"},
		{"inferred after a timestamp", &hclog.StandardLoggerOptions{InferLevels: true, InferLevelsWithTimestamp: true},
			"2025/03/01 12:00:00 [WARN] slow", "WARN", "slow"},
		{"untagged stays info", &hclog.StandardLoggerOptions{InferLevels: true}, "hello", "INFO", "hello"},
		{"forced", &hclog.StandardLoggerOptions{ForceLevel: hclog.Error}, "[INFO] broken", "ERROR", "broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, records := jsonRecords(t, slog.LevelInfo, false)
			l.StandardLogger(tc.opts).Println(tc.line)
			r := one(t, records())
			if r["level"] != tc.wantLevel || r["msg"] != tc.wantMsg || r["component"] != "raft" {
				t.Errorf("record %v, want level %s, msg %q, component raft", r, tc.wantLevel, tc.wantMsg)
			}
		})
	}
	t.Run("writer drops below the handler's level", func(t *testing.T) {
		l, records := jsonRecords(t, slog.LevelInfo, false)
		w := l.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})
		if _, err := w.Write([]byte("[DEBUG] noise\n")); err != nil {
			t.Fatal(err)
		}
		if rs := records(); len(rs) != 0 {
			t.Errorf("records %v, want none", rs)
		}
	})
}

// TestRaftLoggerSource: a handler that adds the source names the line
// that logged, not the adapter.
func TestRaftLoggerSource(t *testing.T) {
	l, records := jsonRecords(t, slog.LevelInfo, true)
	l.Info("here")
	l.Log(hclog.Warn, "here too")
	for _, r := range records() {
		src, _ := r["source"].(map[string]any)
		file, _ := src["file"].(string)
		fn, _ := src["function"].(string)
		if filepath.Base(file) != "raftlog_test.go" || !strings.HasPrefix(fn, "github.com/cairn-sd/cairn/store.TestRaftLoggerSource") {
			t.Errorf("%q: source %v, want this test", r["msg"], src)
		}
	}
}
