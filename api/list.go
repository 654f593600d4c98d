package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/internal/acl"
)

// serviceList is GET /v1/services as of one store revision and one status
// table, each service's summary encoded once. Every open dashboard fetches
// the list whenever the revision moves (ui/static/app.js), so the list is
// counted and encoded once per change, whatever their number, and a
// request only picks the rows its token may read and copies them
// (docs/decisions.md, "What a dashboard costs the server").
type serviceList struct {
	rev, table uint64
	// built is when, by the monotonic clock: listEvery paces the CPU
	// builds take, not a time the API shows.
	built time.Time
	rows  []listRow
	// all is every row: the body for a token that may read them all,
	// gzipped too, as most such bodies go to browsers that take gzip.
	all encodedJSON
}

type listRow struct {
	ns, name string
	// json is the summary as an element of the body's array: indented as
	// writeJSON indents, the first line without its prefix.
	json []byte
}

// encodedJSON is a body already encoded: finish writes it as it is, or
// gz, the same body gzipped, when gz is set and the caller takes gzip.
type encodedJSON struct {
	plain, gz []byte
}

// writeEncoded writes b for r.
func writeEncoded(w http.ResponseWriter, r *http.Request, code int, b encodedJSON) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Add("Vary", "Accept-Encoding")
	body := b.plain
	if b.gz != nil && acceptsGzip(r) {
		body = b.gz
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body) // the client went away; nothing to do
}

// acceptsGzip reports whether r's Accept-Encoding takes gzip: gzip, or
// else "*", with a quality above 0 (RFC 9110 §12.5.3).
func acceptsGzip(r *http.Request) bool {
	gzipQ, starQ := -1.0, -1.0
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			q := 1.0
			for param := range strings.SplitSeq(params, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(param), "=")
				if ok && strings.EqualFold(k, "q") {
					if f, err := strconv.ParseFloat(v, 64); err == nil {
						q = f
					}
				}
			}
			switch coding = strings.TrimSpace(coding); {
			case strings.EqualFold(coding, "gzip"):
				gzipQ = q
			case coding == "*":
				starQ = q
			}
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}

// gzipped is b compressed for speed: once per build of a list that
// every dashboard then fetches.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // a valid level
	_, _ = zw.Write(b)                                 // a bytes.Buffer does not fail
	_ = zw.Close()
	return buf.Bytes()
}

// listEvery is the least time between two builds of the services list.
// A build waits out the rest of it, so that however fast the store
// changes, the list is built at most four times a second, and each
// answer is still at least as new as the store was when it was asked.
const listEvery = 250 * time.Millisecond

// serviceList returns a list at least as new as the store revision and
// status table of the moment it is called, building it if no request has
// since they last moved. A build reads both stamps before the data, so a
// list is never older than its stamp; requests that arrive during a build
// wait for it; and builds are at least listEvery apart.
func (s *Server) serviceList(ctx context.Context) (*serviceList, error) {
	fresh := func(l *serviceList, rev, table uint64) bool {
		return l != nil && l.rev >= rev && l.table >= table
	}
	rev, table := s.cfg.Store.Revision(), s.tableVersion()
	if l := s.list.Load(); fresh(l, rev, table) {
		return l, nil
	}
	s.listMu.Lock()
	defer s.listMu.Unlock()
	l := s.list.Load()
	if fresh(l, rev, table) {
		return l, nil // built while this request waited
	}
	if l != nil {
		if wait := listEvery - time.Since(l.built); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
	}
	// What the store holds now: this build answers the requests queued
	// behind it too.
	rev, table = s.cfg.Store.Revision(), s.tableVersion()
	sums := s.summaries()
	l = &serviceList{rev: rev, table: table, built: time.Now(), rows: make([]listRow, len(sums))}
	parts := make([][]byte, len(sums))
	for i, sum := range sums {
		b, err := json.MarshalIndent(sum, "  ", "  ")
		if err != nil {
			panic(err) // a ServiceSummary always encodes
		}
		l.rows[i] = listRow{ns: sum.Namespace, name: sum.Name, json: b}
		parts[i] = b
	}
	l.all = encodedJSON{plain: joinRows(parts)}
	l.all.gz = gzipped(l.all.plain)
	s.list.Store(l)
	s.metrics.listBuilds.Inc()
	return l, nil
}

// body is the list as id may read it: the rows of the services it may
// read, byte for byte what encoding them with writeJSON would give.
func (l *serviceList) body(id acl.Identity) encodedJSON {
	parts := make([][]byte, 0, len(l.rows))
	for _, r := range l.rows {
		if id.Allows(acl.Read, r.ns, r.name, "") {
			parts = append(parts, r.json)
		}
	}
	if len(parts) == len(l.rows) {
		return l.all
	}
	return encodedJSON{plain: joinRows(parts)}
}

func joinRows(parts [][]byte) []byte {
	if len(parts) == 0 {
		return []byte("[]\n")
	}
	const open, sep, end = "[\n  ", ",\n  ", "\n]\n"
	n := len(open) + len(end) + len(sep)*(len(parts)-1)
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	out = append(out, open...)
	for i, p := range parts {
		if i > 0 {
			out = append(out, sep...)
		}
		out = append(out, p...)
	}
	return append(out, end...)
}

// tableVersion is the version of the status table DNS and xDS answer
// from, 0 without one.
func (s *Server) tableVersion() uint64 {
	p := s.acquire()
	defer p.release()
	return p.version()
}
