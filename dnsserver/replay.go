package dnsserver

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/status"
)

// Past is what a replayed query is answered from (Server.Replay): a
// table the node published, when it was asked, the caller's place, and
// how current the node's view was then.
type Past struct {
	// Table holds the table to answer from (a history's Point.Table).
	Table *status.Publisher
	// At is when the query was asked.
	At time.Time
	// Place is the caller's: what its source address, its trusted
	// client subnet or the server's own place made it.
	Place Place
	// LastSync is when the node's view was last known current at At
	// (Config.LastSync's answer then), and Restored whether it served
	// the table kept on disk (Config.Restored's).
	LastSync time.Time
	Restored bool
}

// Replay answers q as s answered it at p.At from p.Table: s's own answer
// code, with its zone, record limits and serve-stale rule, for a caller
// at p.Place. It is answered as over TCP, so nothing is truncated that a
// UDP answer would have cut; it passes no rate limit or cookie check,
// counts in no metric, and its A and AAAA samples are drawn afresh (the
// same candidates, by weight). s need not be serving.
func (s *Server) Replay(q *dns.Msg, p Past) (*dns.Msg, error) {
	cfg := s.cfg
	cfg.Table, cfg.Own, cfg.Subnets, cfg.ECSTrusted, cfg.Unheld = p.Table, p.Place, nil, nil, nil
	cfg.Now = func() time.Time { return p.At }
	cfg.LastSync = func() time.Time { return p.LastSync }
	cfg.Restored = func() bool { return p.Restored }
	cfg.RRL.Mode, cfg.Cookies.Mode = ModeOff, ModeOff
	cfg.Registerer = nil
	r, err := New(cfg)
	if err != nil {
		return nil, err
	}
	r.started = p.At
	req := requestOf(q, netip.Addr{}, true)
	req.now, req.waited = p.At, true
	out, rcode, _ := r.answer(&req, make([]byte, maxMsg))
	if rcode == rcodeWait {
		return nil, fmt.Errorf("dnsserver: replaying %s: the table does not hold the service", req.name)
	}
	m := new(dns.Msg)
	if err := m.Unpack(out); err != nil {
		return nil, fmt.Errorf("dnsserver: replaying %s: %w", req.name, err)
	}
	return m, nil
}

// Domain returns the apex of the zone s serves.
func (s *Server) Domain() string { return s.cfg.Zone.Domain() }
