// Package tablefile keeps a node's last published status table on disk,
// so that a server restarted while its cluster has no quorum answers what
// it answered before it stopped, marked stale, instead of nothing
// (SPEC §7). The file is replaced atomically and durably (package
// durable: write, fsync, rename, fsync the directory), carries a format
// version and a SHA-256 of its body, and is written at most once per
// interval, off the serving path.
//
// A table on disk is last-known-good state, never truth: the store and
// fresh evidence rebuild the table as soon as the node's replica has
// caught up (SPEC §0.2). It is read once, at start.
//
// Imports: the status table, safe file writes (internal/durable) and the
// pacing of long work (internal/pace); never the store or the health
// loop. Take, Load and Save are safe anywhere; a Keeper's Run is its one
// goroutine and SaveNow may be called from any other.
package tablefile

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/cairn-sd/cairn/internal/durable"
	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/status"
)

// FormatVersion is the version of the file's body; a file of another
// version is not read.
const FormatVersion = 1

// magic opens every file: "cairn-table", the version, the body's length
// and its SHA-256, then a newline and the JSON body.
const magic = "cairn-table"

// Snapshot is one published table as the file holds it.
type Snapshot struct {
	// Revision is the store revision the table was built from.
	Revision uint64 `json:"revision"`
	// Synced is when the node last knew the table to be current (its
	// store's last contact with a leader, or the build, the older); Saved
	// when the file was written.
	Synced time.Time `json:"synced"`
	Saved  time.Time `json:"saved"`
	// Capacity is the table's number of slots.
	Capacity   int      `json:"capacity"`
	Services   []string `json:"services"`   // names by id, from 1
	Localities []string `json:"localities"` // names by id, from 1
	// Views is what an agent keeps of each view its table was filled
	// from (package agent); a server's file has none.
	Views []View `json:"views,omitempty"`
	// Entries are the used slots.
	Entries      []SlotEntry          `json:"entries"`
	ServiceInfos []status.ServiceInfo `json:"service_infos"`
}

// View is one service's view as an agent holds it: its resource name
// ("<svc>.<ns>"), revision and version, when it came and when the agent
// last knew it current.
type View struct {
	Name      string    `json:"name"`
	Revision  uint64    `json:"revision"`
	Version   string    `json:"version"`
	Received  time.Time `json:"received"`
	Refreshed time.Time `json:"refreshed"`
}

// SlotEntry is one used slot: its entry and what readers need of its
// instance. Its JSON is fileSlot's.
type SlotEntry struct {
	Slot     int
	Entry    status.Entry
	Instance *status.InstanceInfo
}

// fileSlot is a SlotEntry as the file holds it: the entry's fields are
// numbers under their Go names, as format 1 has always written them
// (status.Entry's Verdict and Lifecycle marshal as names; the file keeps
// the numbers).
type fileSlot struct {
	Slot     int                  `json:"slot"`
	Entry    fileEntry            `json:"entry"`
	Instance *status.InstanceInfo `json:"instance,omitempty"`
}

type fileEntry struct {
	Key                       uint64
	Incarnation               uint64
	Service                   uint32
	Weight, BaseWeight        uint16
	Region, Zone              uint16
	Verdict, Lifecycle, Flags uint8
	// Shift is left out when 0: a table without evacuations is written
	// as it was before they existed.
	Shift uint8 `json:",omitempty"`
}

func (se *SlotEntry) file() fileSlot {
	e := &se.Entry
	return fileSlot{Slot: se.Slot, Instance: se.Instance, Entry: fileEntry{Key: e.Key, Incarnation: e.Incarnation,
		Service: e.Service, Weight: e.Weight, BaseWeight: e.BaseWeight, Region: e.Region, Zone: e.Zone,
		Verdict: uint8(e.Verdict), Lifecycle: uint8(e.Lifecycle), Flags: uint8(e.Flags), Shift: e.Shift}}
}

// MarshalJSON writes se as the file holds it.
func (se SlotEntry) MarshalJSON() ([]byte, error) { return json.Marshal(se.file()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (se *SlotEntry) UnmarshalJSON(b []byte) error {
	var f fileSlot
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	e := f.Entry
	// A verdict or lifecycle without a name would be served and then fail
	// every answer that names it: the file is refused (its previous copy
	// is read instead).
	if _, err := status.Verdict(e.Verdict).MarshalText(); err != nil {
		return fmt.Errorf("slot %d: %w", f.Slot, err)
	}
	if _, err := status.Lifecycle(e.Lifecycle).MarshalText(); err != nil {
		return fmt.Errorf("slot %d: %w", f.Slot, err)
	}
	*se = SlotEntry{Slot: f.Slot, Instance: f.Instance, Entry: status.Entry{Key: e.Key, Incarnation: e.Incarnation,
		Service: e.Service, Weight: e.Weight, BaseWeight: e.BaseWeight, Region: e.Region, Zone: e.Zone,
		Verdict: status.Verdict(e.Verdict), Lifecycle: status.Lifecycle(e.Lifecycle), Flags: status.Flags(e.Flags),
		Shift: min(e.Shift, status.ShiftAll)}}
	return nil
}

// Take copies t into a Snapshot; synced is when the table was last known
// current.
func Take(t *status.Table, synced, now time.Time) *Snapshot {
	return take(t, synced, now, nil, 0)
}

// take is Take, stepping p between slots (a table of 8,000 instances
// takes a millisecond or more to copy: see package pace), with room
// for n entries made at once. The table stays acquired through the
// pauses, as a query holds it: a build meanwhile writes into another.
func take(t *status.Table, synced, now time.Time, p *pace.Pacer, n int) *Snapshot {
	s := &Snapshot{Revision: t.StoreRevision(), Synced: synced, Saved: now, Capacity: t.Capacity()}
	names := func(n *status.Names) []string {
		out := make([]string, 0, n.Len())
		for i := 1; i < n.Len(); i++ {
			out = append(out, n.Name(uint32(i)))
		}
		return out
	}
	s.Services, s.Localities = names(t.Services()), names(t.Localities())
	d := t.Directory()
	if d != nil {
		s.ServiceInfos = d.Services
	}
	s.Entries = make([]SlotEntry, 0, n)
	for slot := range t.Capacity() {
		p.Step()
		e := t.Entry(slot)
		if !e.Used() {
			continue
		}
		s.Entries = append(s.Entries, SlotEntry{Slot: slot, Entry: e, Instance: d.Instance(slot)})
	}
	return s
}

// Fill writes the snapshot into a table being built (status.Publisher's
// Build): every slot, the names and the directory. Slots beyond the
// table's capacity are dropped and counted in the returned number.
func (s *Snapshot) Fill(b *status.Builder) (dropped int) {
	es := b.Entries()
	clear(es)
	d := &status.Directory{Revision: s.Revision, Services: s.ServiceInfos, Instances: make([]*status.InstanceInfo, len(es))}
	for _, se := range s.Entries {
		if se.Slot < 0 || se.Slot >= len(es) {
			dropped++
			continue
		}
		es[se.Slot] = se.Entry
		d.Instances[se.Slot] = se.Instance
	}
	d.Index(func(slot int) uint32 { return es[slot].Service }, nil)
	b.SetStoreRevision(s.Revision)
	b.SetServices(status.NewNames(s.Services...))
	b.SetLocalities(status.NewNames(s.Localities...))
	b.SetDirectory(d)
	return dropped
}

// ErrCorrupt is wrapped by Load's errors about a file that is there but
// cannot be trusted.
var ErrCorrupt = errors.New("tablefile: corrupt")

// Load reads the snapshot at path. A missing file is (nil, nil): a node
// that never published a table. A file that is truncated, of another
// format version or whose checksum does not match is an error wrapping
// ErrCorrupt; the caller starts without it.
func Load(path string) (*Snapshot, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tablefile: %w", err)
	}
	head, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil, fmt.Errorf("%w: %s: no header", ErrCorrupt, path)
	}
	f := bytes.Fields(head)
	if len(f) != 4 || string(f[0]) != magic {
		return nil, fmt.Errorf("%w: %s: not a cairn table file", ErrCorrupt, path)
	}
	if v, err := strconv.Atoi(string(f[1])); err != nil || v != FormatVersion {
		return nil, fmt.Errorf("%w: %s: format version %s, this build reads %d", ErrCorrupt, path, f[1], FormatVersion)
	}
	if n, err := strconv.Atoi(string(f[2])); err != nil || n != len(body) {
		return nil, fmt.Errorf("%w: %s: body of %d bytes, header says %s", ErrCorrupt, path, len(body), f[2])
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != string(f[3]) {
		return nil, fmt.Errorf("%w: %s: checksum mismatch", ErrCorrupt, path)
	}
	var s Snapshot
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return &s, nil
}

// PreviousSuffix names the previous copy a Keeper keeps beside the file:
// the table it replaced, for LoadKept to fall back on when the file
// itself cannot be read.
const PreviousSuffix = ".prev"

// LoadKept is Load, falling back on the previous copy a Keeper keeps
// (path + PreviousSuffix) when path is missing, unreadable or corrupt.
// The error reports what was wrong with path, for the caller to log, also
// when the previous copy served (a non-nil snapshot with an error); the
// previous copy's own problem is joined to it when neither served. A
// node that never wrote either gets (nil, nil).
func LoadKept(path string) (*Snapshot, error) {
	s, err := Load(path)
	if s != nil && err == nil {
		return s, nil
	}
	prev := path + PreviousSuffix
	ps, perr := Load(prev)
	switch {
	case ps != nil && perr == nil && err == nil:
		return ps, fmt.Errorf("tablefile: %s is missing; read the previous copy %s", path, prev)
	case ps != nil && perr == nil:
		return ps, fmt.Errorf("%w; read the previous copy %s", err, prev)
	case err == nil && perr == nil:
		return nil, nil // neither exists
	}
	return nil, errors.Join(err, perr)
}

// keepPreviousCopy makes the previous copy (path + PreviousSuffix) the file
// now at path, if there is one, before a save replaces it: a hard link
// renamed over the previous copy, so that every step leaves a whole
// file at each name. A crash after it leaves the same table under both
// names, which LoadKept reads either way.
func keepPreviousCopy(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	link := path + PreviousSuffix + ".link"
	_ = os.Remove(link) // a crash's leftover
	if err := os.Link(path, link); err != nil {
		return fmt.Errorf("tablefile: keeping the previous copy of %s: %w", path, err)
	}
	if err := os.Rename(link, path+PreviousSuffix); err != nil {
		_ = os.Remove(link)
		return fmt.Errorf("tablefile: keeping the previous copy of %s: %w", path, err)
	}
	return nil
}

// Save writes s to path atomically and durably (package durable), so
// that a crash leaves either the old file or the new one.
func Save(path string, s *Snapshot) error {
	return save(path, s, nil)
}

// Replace is Save, making the file it replaces the previous copy first
// when keepPrevious says that file is whole (it read back whole, or the
// caller wrote it), as a Keeper does. A failure to keep the previous
// copy does not stop the save; it is returned with the save's own.
func Replace(path string, s *Snapshot, keepPrevious bool) error {
	var kerr error
	if keepPrevious {
		kerr = keepPreviousCopy(path)
	}
	return errors.Join(kerr, save(path, s, nil))
}

// save is Save, pausing whenever p says so: a table of many instances
// takes milliseconds to encode and hash, which a server on one core must
// not spend in one go (see package pace).
//
// The header carries the body's length and SHA-256, so it can be
// written only once the whole body has been encoded. The body is some
// 250 bytes an instance, tens of megabytes, and used to be encoded into
// a buffer to be written after its header: a collection that marked
// while a save held it (one every Interval) counted it, and set the next
// goal twice that much higher. save encodes the body twice instead, into
// the hash and then into the file, and holds none of it: the Snapshot is
// not modified and its JSON is deterministic (encoding/json sorts map
// keys), so both are the same bytes.
func save(path string, s *Snapshot, p *pace.Pacer) error {
	h := sha256.New()
	hashed := &counter{w: h}
	if err := encode(hashed, s, p); err != nil {
		return fmt.Errorf("tablefile: encoding: %w", err)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	err := durable.Write(path, 0o600, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 64<<10)
		if _, err := fmt.Fprintf(bw, "%s %d %d %s\n", magic, FormatVersion, hashed.n, hex.EncodeToString(sum[:])); err != nil {
			return err
		}
		written := &counter{w: bw}
		if err := encode(written, s, p); err != nil {
			return err
		}
		if written.n != hashed.n {
			return fmt.Errorf("the body came to %d bytes, then to %d", hashed.n, written.n)
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("tablefile: %w", err)
	}
	return nil
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += n
	return n, err
}

// headTail is how the JSON of a Snapshot without entries and service
// infos ends; encode writes those two lists itself, one element at a time.
const headTail = `"entries":null,"service_infos":null}`

// encode writes json.Marshal(s) into w, with a step between elements of
// the long lists, one element at a time: the body it writes decodes into
// the same Snapshot. w should buffer small writes.
func encode(w io.Writer, s *Snapshot, p *pace.Pacer) error {
	head := *s
	head.Entries, head.ServiceInfos = nil, nil
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	if !bytes.HasSuffix(b, []byte(headTail)) {
		// Snapshot's fields changed order: encode must follow.
		return errors.New("tablefile: the snapshot's JSON does not end with its entries and service infos")
	}
	// The first write error is kept and returned; the writes after it
	// are skipped.
	var werr error
	write := func(b []byte) {
		if werr == nil {
			_, werr = w.Write(b)
		}
	}
	write(b[:len(b)-len(headTail)])
	punct := []byte(",]}")
	comma, closeList, closeObject := punct[0:1], punct[1:2], punct[2:3]
	enc := json.NewEncoder(w) // one value and a newline per call
	list := func(name string, n int, elem func(i int) any) error {
		if n == 0 {
			write([]byte(`"` + name + `":null`)) // as json.Marshal writes a nil list
			return werr
		}
		write([]byte(`"` + name + `":[`))
		for i := range n {
			if i > 0 {
				write(comma)
			}
			if werr != nil {
				return werr
			}
			if err := enc.Encode(elem(i)); err != nil {
				return err
			}
			p.Step()
		}
		write(closeList)
		return werr
	}
	var slot fileSlot // one for every entry: Encode is done with it before the next
	if err := list("entries", len(s.Entries), func(i int) any { slot = s.Entries[i].file(); return &slot }); err != nil {
		return err
	}
	write(comma)
	if err := list("service_infos", len(s.ServiceInfos), func(i int) any { return &s.ServiceInfos[i] }); err != nil {
		return err
	}
	write(closeObject)
	return werr
}

// Config configures a Keeper.
type Config struct {
	// Path is the file. Required.
	Path string
	// Table is the publisher whose tables are kept. Required.
	Table *status.Publisher
	// Synced tells how current the published table is (health's
	// Node.Synced). Required.
	Synced func() time.Time
	// Interval is the least time between two writes. Defaults to 5s.
	Interval time.Duration
	// PathGood says that the file at Path read back whole at start
	// (LoadKept without an error): only then does the keeper's first
	// save make it the previous copy. A file that failed its checks, or
	// was not read, never displaces the previous copy; after its first
	// save the keeper trusts the files it wrote.
	PathGood bool
	Now      func() time.Time
	Logger   *slog.Logger
}

// Keeper writes each new table to disk, at most once per Interval, and
// the last one when it stops.
type Keeper struct {
	cfg   Config
	pacer *pace.Pacer
	saved uint64 // the version last written
	// entries is the last snapshot's count, the room the next is made
	// with.
	entries int
	// wrote is whether this keeper has written the file.
	wrote bool
}

// NewKeeper validates cfg.
func NewKeeper(cfg Config) (*Keeper, error) {
	if cfg.Path == "" || cfg.Table == nil || cfg.Synced == nil {
		return nil, errors.New("tablefile: Path, Table and Synced are required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Keeper{cfg: cfg, pacer: pace.New(pace.DefaultSlice, pace.DefaultPause, cfg.Now)}, nil
}

// Run keeps the file until ctx is done, then writes the current table
// once more if it is newer than the file.
func (k *Keeper) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			k.SaveNow()
			return nil
		case <-t.C:
		}
		select {
		case <-ctx.Done():
			k.SaveNow()
			return nil
		case <-k.cfg.Table.Changed(k.saved):
		}
		k.SaveNow()
		t.Reset(k.cfg.Interval)
	}
}

// SaveNow writes the current table if it is newer than the last written,
// and logs a failure (the node keeps serving; the file is only a
// fallback).
func (k *Keeper) SaveNow() {
	t := k.cfg.Table.Acquire()
	if t == nil {
		return
	}
	v := t.Version()
	if v == k.saved {
		t.Release()
		return
	}
	// The file becomes the previous copy if this keeper wrote it, or if
	// it read back whole at start: a corrupt file must not replace a
	// good previous copy.
	if k.wrote || k.cfg.PathGood {
		if err := keepPreviousCopy(k.cfg.Path); err != nil {
			// The save goes on: the previous copy is a second chance,
			// not a condition of writing the file.
			k.cfg.Logger.Warn("keeping the previous status table on disk", "err", err)
		}
	}
	k.pacer.Begin()
	s := take(t, k.cfg.Synced(), k.cfg.Now(), k.pacer, k.entries)
	t.Release()
	k.entries = len(s.Entries)
	if err := save(k.cfg.Path, s, k.pacer); err != nil {
		k.cfg.Logger.Warn("keeping the status table on disk", "err", err)
		return
	}
	k.saved = v
	k.wrote = true
}
