package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/cairn-sd/cairn/internal/durable"
)

// The history on disk (Config.Path): what Record and the freshness
// notes produce is framed into h.pending under h.mu, and Run's writer
// appends it to the file once a Tick, off the recording path and never
// on a query's. A disk that stalls holds up only the writer; past
// maxPending the records waiting are dropped, and the next write
// rewrites the file from memory instead (compact), so that the file
// never misses a record between two it holds. The file is rewritten the
// same way once it has grown to twice what its last rewrite held (and
// past compactFloor), which drops the steps memory has let go.
//
// It is last-known history, not acknowledged data: a crash loses what
// was not yet written (a Tick's worth), and a torn or corrupt tail is
// cut at the last record that checks.

const (
	maxPending   = 16 << 20
	compactFloor = 4 << 20
)

// file is the writer's side of the history's file.
type file struct {
	path    string
	f       *os.File // open for appending; nil until the first write
	size    int64
	compact int64 // its size after the last rewrite
	rewrite bool  // the file misses records: rewrite it from memory
}

// emit frames a record for the file. Called with h.mu held.
func (h *History) emit(body []byte) {
	if h.file == nil {
		return
	}
	if len(h.pending)+len(body) > maxPending {
		h.pending, h.file.rewrite = h.pending[:0], true
		h.m.fileErrors.WithLabelValues("dropped").Inc()
		return
	}
	h.pending = frame(h.pending, body)
}

// load reads the file at path into h, at New. A missing file is an
// empty history; a file of another format, or with a torn tail, is read
// as far as it checks and rewritten at the first write.
func (h *History) load(path string) error {
	h.file = &file{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		h.file.rewrite = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("history: reading %s: %w", path, err)
	}
	h.file.size = int64(len(b))
	if len(b) < len(fileHeader) || string(b[:len(fileHeader)]) != fileHeader {
		h.cfg.Logger.Warn("history file is of another format: starting an empty history", "path", path)
		h.file.rewrite = true
		return nil
	}
	rest := b[len(fileHeader):]
	records := 0
	for len(rest) > 0 {
		body, next, err := nextFrame(rest)
		if err == nil {
			err = h.apply(body)
		}
		if err != nil {
			h.cfg.Logger.Warn("history file: reading stopped at a torn or corrupt record; the rest is dropped",
				"path", path, "offset", len(b)-len(rest), "records", records, "err", err)
			h.file.rewrite = true
			break
		}
		rest = next
		records++
	}
	h.trim(h.cfg.Now())
	h.file.compact = h.file.size
	h.cfg.Logger.Info("history restored", "path", path, "records", records, "services", len(h.services), "bytes", h.held)
	return nil
}

// apply applies one record read from the file.
func (h *History) apply(body []byte) error {
	d := &dec{b: body[1:]}
	key := func() string {
		k := d.str()
		if ns, name, ok := strings.Cut(k, "/"); !ok || ns == "" || name == "" {
			d.fail("a service's key")
		}
		return k
	}
	switch body[0] {
	case kindLocality:
		name := d.str()
		if d.err == nil {
			h.intern(name)
		}
	case kindInfo:
		key, at := key(), d.time()
		if d.err == nil && h.services[key] == nil {
			d.fail("a service named before its id")
		}
		var is infoStep
		if j := d.raw(d.n(1)); d.err == nil {
			if err := json.Unmarshal(j, &is.info); err != nil {
				return err
			}
			is.at = at
			s := h.services[key]
			s.infos = append(s.infos, is)
		}
	case kindService:
		id, k := d.u(), key()
		// A key named again (forgotten, then seen anew) takes its new id.
		if d.err == nil && (id == 0 || id > 1<<24 || int(id) < len(h.ids) && h.ids[id] != nil) {
			d.fail("a service's id")
		}
		if d.err == nil {
			h.serviceWith(k, uint32(id))
		}
	case kindStep, kindBase:
		var base *service
		if body[0] == kindBase {
			if base = h.byID(uint32(min(d.u(), 1<<31))); base == nil {
				d.fail("a base's service")
			}
		}
		ns, st := readStep(d)
		if d.err == nil && len(d.b) > 0 {
			d.fail("the record's end")
		}
		if d.err != nil {
			return d.err
		}
		known := func(id uint32) bool {
			s := h.byID(id)
			return s != nil && s.ns == ns && (base == nil || s == base)
		}
		if err := st.check(len(h.locNames), known); err != nil {
			return err
		}
		if base == nil {
			h.add(h.log(ns), st)
			return nil
		}
		base.baseAt, base.baseVersion, base.baseRevision = st.time(), st.version, st.revision
		return st.each(func(uint32) map[uint32]member { return base.base }, nil)
	case kindFresh:
		if len(d.b) < 1 {
			return errTorn
		}
		f := Freshness(d.b[0])
		d.b = d.b[1:]
		fs := freshStep{f: f, at: d.time(), synced: d.time()}
		if f > Expired {
			d.fail("a freshness")
		}
		if d.err == nil {
			h.fresh = append(h.fresh, fs)
		}
	case kindOrigin:
		if at := d.time(); d.err == nil && (h.origin.IsZero() || at.Before(h.origin)) {
			h.origin = at
		}
	default:
		return fmt.Errorf("history: record of unknown kind %d", body[0])
	}
	return d.err
}

// image is the whole history as a rewritten file holds it. Called with
// h.mu held.
func (h *History) image() ([]byte, error) {
	b := []byte(fileHeader)
	if !h.origin.IsZero() {
		b = frame(b, originRecord(h.origin))
	}
	for _, name := range h.locNames[1:] {
		b = frame(b, localityRecord(name))
	}
	for _, key := range slices.Sorted(maps.Keys(h.services)) {
		s := h.services[key]
		b = frame(b, serviceRecord(s))
		for _, is := range s.infos {
			r, err := infoRecord(key, is)
			if err != nil {
				return nil, err
			}
			b = frame(b, r)
		}
		if !s.baseAt.IsZero() || len(s.base) > 0 {
			b = frame(b, baseRecord(s))
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(h.logs)) {
		live := h.logs[ns].live()
		for i := range live {
			b = frame(b, stepRecord(ns, &live[i]))
		}
	}
	for _, fs := range h.fresh {
		b = frame(b, freshRecord(fs))
	}
	return b, nil
}

// flush writes what is pending: appended, or the whole history when the
// file must be rewritten. Only Run's goroutine calls it.
func (h *History) flush() {
	if h.file == nil {
		return
	}
	h.mu.Lock()
	f := h.file
	var out []byte
	rewrite := f.rewrite || f.size > max(2*f.compact, compactFloor)
	if rewrite {
		img, err := h.image()
		if err != nil {
			h.mu.Unlock()
			h.cfg.Logger.Error("history: encoding the history", "err", err)
			return
		}
		out = img
		f.rewrite = false
	} else {
		out = slices.Clone(h.pending)
	}
	h.pending = h.pending[:0]
	h.mu.Unlock()
	if len(out) == 0 {
		return
	}
	if err := f.write(out, rewrite); err != nil {
		h.cfg.Logger.Warn("history: writing the file; the next write rewrites it", "path", f.path, "err", err)
		h.m.fileErrors.WithLabelValues("write").Inc()
		h.mu.Lock()
		f.rewrite = true
		h.mu.Unlock()
	}
	h.m.fileBytes.Set(float64(f.size))
}

// write appends out to the file, or replaces the file with it.
func (f *file) write(out []byte, rewrite bool) error {
	if rewrite {
		if f.f != nil {
			f.f.Close()
			f.f = nil
		}
		if err := durable.WriteFile(f.path, out, 0o600); err != nil {
			return err
		}
		f.size, f.compact = int64(len(out)), int64(len(out))
		return nil
	}
	if f.f == nil {
		o, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		f.f = o
	}
	n, err := f.f.Write(out)
	f.size += int64(n)
	if err == nil {
		err = f.f.Sync()
	}
	return err
}

// close closes the file, after a last flush.
func (h *History) close() {
	h.flush()
	if h.file != nil && h.file.f != nil {
		h.file.f.Close()
		h.file.f = nil
	}
}
