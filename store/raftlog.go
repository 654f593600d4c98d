package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// raftNameKey carries an hclog logger's name ("raft", or "raft.x" for a
// logger raft names "x"). It is the key the server's own components log
// under, so that one filter (component=raft) selects raft's records.
const raftNameKey = "component"

// levelTrace is where hclog's Trace lands: below slog's Debug, as hclog
// puts it below its own Debug. A handler shows it only when set that low
// (--log-level=debug-4, which slog.Level parses).
const levelTrace = slog.LevelDebug - 4

// raftLogger is the hclog.Logger that raft, its TCP transport and its
// snapshot store log through. Each call becomes one record of the store's
// slog logger at the matching level, hclog's key/value pairs become
// attributes, and the logger's name is the raftNameKey attribute.
//
// It has no level of its own: whether a level is logged is the slog
// handler's answer (Enabled), so raft follows --log-level like the rest
// of the server. A raftLogger is immutable, and safe for concurrent use
// as long as its handler is.
type raftLogger struct {
	base    *slog.Logger // the store's logger, without the name or With's pairs
	h       slog.Handler // base's handler with the name and With's pairs attached
	name    string
	implied []any // With's pairs, keys strings, each key once (the last value wins)
}

var _ hclog.Logger = (*raftLogger)(nil)

// newRaftLogger returns an hclog.Logger named name that logs to base
// with the pairs implied (as With keeps them). The name and pairs are
// attached to the handler once rather than to every record.
func newRaftLogger(base *slog.Logger, name string, implied []any) *raftLogger {
	as := make([]slog.Attr, 0, 1+len(implied)/2)
	if name != "" {
		as = append(as, slog.String(raftNameKey, name))
	}
	as = append(as, attrs(implied)...)
	h := base.Handler()
	if len(as) > 0 {
		h = h.WithAttrs(as)
	}
	return &raftLogger{base: base, h: h, name: name, implied: implied}
}

// slogLevel maps an hclog level to slog's; false means "never log"
// (hclog.Off, or a level hclog does not define). NoLevel is Info,
// hclog's default level.
func slogLevel(l hclog.Level) (slog.Level, bool) {
	switch l {
	case hclog.Trace:
		return levelTrace, true
	case hclog.Debug:
		return slog.LevelDebug, true
	case hclog.NoLevel, hclog.Info:
		return slog.LevelInfo, true
	case hclog.Warn:
		return slog.LevelWarn, true
	case hclog.Error:
		return slog.LevelError, true
	}
	return 0, false
}

func (l *raftLogger) enabled(level hclog.Level) bool {
	lvl, ok := slogLevel(level)
	return ok && l.h.Enabled(context.Background(), lvl)
}

// log emits one record. skip is the number of frames between log's
// caller and the code that logged (for the record's source); 0 leaves
// the source out.
func (l *raftLogger) log(skip int, level hclog.Level, msg string, args []any) {
	lvl, ok := slogLevel(level)
	ctx := context.Background()
	if !ok || !l.h.Enabled(ctx, lvl) {
		return
	}
	var pc uintptr
	if skip > 0 {
		// As slog.Logger does, so that a handler with AddSource names
		// raft's line rather than this file's: skip runtime.Callers,
		// log, and the frames the caller says.
		var pcs [1]uintptr
		runtime.Callers(2+skip, pcs[:])
		pc = pcs[0]
	}
	// The record's time is the wall clock's, as slog.Logger stamps it:
	// Config.Now is the store's clock for leases, which a test may stop.
	r := slog.NewRecord(time.Now(), lvl, msg, pc)
	r.AddAttrs(attrs(args)...)
	// A handler's error has nowhere to go (slog.Logger drops it too).
	_ = l.h.Handle(ctx, r)
}

// Log emits a record at level; hclog.Off and unknown levels emit none.
func (l *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	l.log(1, level, msg, args)
}

// Trace emits a record below slog's Debug (levelTrace).
func (l *raftLogger) Trace(msg string, args ...any) { l.log(1, hclog.Trace, msg, args) }

// Debug emits a record at slog's Debug.
func (l *raftLogger) Debug(msg string, args ...any) { l.log(1, hclog.Debug, msg, args) }

// Info emits a record at slog's Info.
func (l *raftLogger) Info(msg string, args ...any) { l.log(1, hclog.Info, msg, args) }

// Warn emits a record at slog's Warn.
func (l *raftLogger) Warn(msg string, args ...any) { l.log(1, hclog.Warn, msg, args) }

// Error emits a record at slog's Error.
func (l *raftLogger) Error(msg string, args ...any) { l.log(1, hclog.Error, msg, args) }

// IsTrace reports whether the handler takes levelTrace records.
func (l *raftLogger) IsTrace() bool { return l.enabled(hclog.Trace) }

// IsDebug reports whether the handler takes Debug records.
func (l *raftLogger) IsDebug() bool { return l.enabled(hclog.Debug) }

// IsInfo reports whether the handler takes Info records.
func (l *raftLogger) IsInfo() bool { return l.enabled(hclog.Info) }

// IsWarn reports whether the handler takes Warn records.
func (l *raftLogger) IsWarn() bool { return l.enabled(hclog.Warn) }

// IsError reports whether the handler takes Error records.
func (l *raftLogger) IsError() bool { return l.enabled(hclog.Error) }

// GetLevel returns the lowest hclog level the handler takes, or
// hclog.Off when it takes none of them.
func (l *raftLogger) GetLevel() hclog.Level {
	for _, lvl := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(lvl) {
			return lvl
		}
	}
	return hclog.Off
}

// SetLevel does nothing: the level is the slog handler's, set once for
// the whole server by --log-level, and raft's records follow it like
// everyone else's. hclog allows this ("If an implementation cannot update
// the level on the fly, it should no-op"), and raft never calls it.
func (l *raftLogger) SetLevel(hclog.Level) {}

// ImpliedArgs returns the pairs added by With.
func (l *raftLogger) ImpliedArgs() []any { return slices.Clone(l.implied) }

// With returns a logger whose records carry args as well. As in hclog, a
// key given again replaces its earlier value, and an odd trailing value
// is kept under hclog.MissingKey.
func (l *raftLogger) With(args ...any) hclog.Logger {
	implied := slices.Clone(l.implied)
	for i := 0; i < len(args); i += 2 {
		var k string
		var v any
		if i+1 == len(args) {
			k, v = hclog.MissingKey, args[i]
		} else {
			k, v = key(args[i]), args[i+1]
		}
		j := 0
		for j < len(implied) && implied[j] != k {
			j += 2
		}
		if j < len(implied) {
			implied[j+1] = v
		} else {
			implied = append(implied, k, v)
		}
	}
	return newRaftLogger(l.base, l.name, implied)
}

// Name returns the logger's name, as its records carry it.
func (l *raftLogger) Name() string { return l.name }

// Named returns a logger named name below this one ("raft.name").
func (l *raftLogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return newRaftLogger(l.base, name, l.implied)
}

// ResetNamed returns a logger named name; an empty name leaves the
// attribute out.
func (l *raftLogger) ResetNamed(name string) hclog.Logger {
	return newRaftLogger(l.base, name, l.implied)
}

// StandardLogger returns a *log.Logger each of whose lines becomes a
// record (see StandardWriter). It adds no prefix or timestamp of its own:
// the handler stamps the record.
func (l *raftLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer each Write of which becomes one record:
// at Info, or, as opts asks, at the level of a leading [TRACE], [DEBUG],
// [INFO], [WARN], [ERR] or [ERROR] tag (InferLevels, the tag then cut
// from the message) or at ForceLevel. A *log.Logger writes each of its
// lines with one Write.
func (l *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	w := &stdWriter{l: l}
	if opts != nil {
		w.opts = *opts
	}
	return w
}

type stdWriter struct {
	l    *raftLogger
	opts hclog.StandardLoggerOptions
}

func (w *stdWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, " \t\r\n"))
	level := hclog.Info
	switch {
	case w.opts.ForceLevel != hclog.NoLevel:
		level = w.opts.ForceLevel
		if _, rest, ok := cutLevelTag(msg); ok {
			msg = rest
		}
	case w.opts.InferLevels:
		line := msg
		if w.opts.InferLevelsWithTimestamp {
			line = skipTimestamp(line)
		}
		if lvl, rest, ok := cutLevelTag(line); ok {
			level, msg = lvl, rest
		}
	}
	// No source: the frames above Write differ with how it was reached.
	w.l.log(0, level, msg, nil)
	return len(p), nil
}

// cutLevelTag returns the level of the tag line starts with (one of
// those hclog's standard logger recognises), and the rest of the line.
func cutLevelTag(line string) (hclog.Level, string, bool) {
	tags := [...]struct {
		tag   string
		level hclog.Level
	}{
		{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error},
	}
	for _, t := range tags {
		if rest, ok := strings.CutPrefix(line, t.tag); ok {
			return t.level, strings.TrimSpace(rest), true
		}
	}
	return hclog.NoLevel, line, false
}

// skipTimestamp returns line from its first '[' when what comes before
// it looks like a timestamp (it starts with a digit: "2006/01/02 15:04:05
// [WARN] …", "2006-01-02T15:04:05Z [WARN] …"); otherwise line.
func skipTimestamp(line string) string {
	i := strings.IndexByte(line, '[')
	if i <= 0 || line[0] < '0' || line[0] > '9' {
		return line
	}
	return line[i:]
}

// attrs turns hclog's alternating keys and values into attributes. A
// trailing value without a key is kept under hclog.MissingKey, where
// hclog itself writes it, or as "stacktrace" if it is one.
func attrs(args []any) []slog.Attr {
	out := make([]slog.Attr, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 < len(args) {
			out = append(out, attr(key(args[i]), args[i+1]))
			continue
		}
		if st, ok := args[i].(hclog.CapturedStacktrace); ok {
			out = append(out, slog.String("stacktrace", string(st)))
		} else {
			out = append(out, attr(hclog.MissingKey, args[i]))
		}
	}
	return out
}

// key is an hclog key as a string; hclog asks for strings but formats
// anything else.
func key(k any) string {
	if s, ok := k.(string); ok {
		return s
	}
	return fmt.Sprint(k)
}

// attr is one attribute. Values slog has a kind for (strings, numbers,
// durations, times) and errors are kept as they are. hclog's formatting
// types are rendered as hclog renders them. Any other value with a
// String method is rendered by it, as hclog's text output did: raft
// passes its *Raft ("leader", r), which a JSON handler would otherwise
// marshal as {}.
func attr(k string, v any) slog.Attr {
	switch v := v.(type) {
	case hclog.Format:
		if f, ok := firstString(v); ok {
			return slog.String(k, fmt.Sprintf(f, v[1:]...))
		}
		return slog.String(k, fmt.Sprint(v...))
	case hclog.Hex:
		return slog.String(k, "0x"+strconv.FormatUint(uint64(v), 16))
	case hclog.Octal:
		return slog.String(k, "0"+strconv.FormatUint(uint64(v), 8))
	case hclog.Binary:
		return slog.String(k, "0b"+strconv.FormatUint(uint64(v), 2))
	case hclog.Quote:
		return slog.String(k, string(v)) // the handler quotes as it needs
	case hclog.CapturedStacktrace:
		return slog.String(k, string(v))
	case error, slog.LogValuer:
		return slog.Any(k, v)
	}
	a := slog.Any(k, v)
	if a.Value.Kind() == slog.KindAny {
		if _, ok := v.(fmt.Stringer); ok {
			// fmt, not String itself: it survives a nil receiver.
			return slog.String(k, fmt.Sprint(v))
		}
	}
	return a
}

func firstString(f hclog.Format) (string, bool) {
	if len(f) == 0 {
		return "", false
	}
	s, ok := f[0].(string)
	return s, ok
}
