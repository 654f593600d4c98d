package dnsserver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// MaxUnheldWaiting bounds the UDP queries waiting at once for unheld
// services (Config.Unheld): each holds a copy of its datagram and a
// goroutine, and a flood of names an agent does not hold must not grow
// it without end. Past it, a query is answered at once.
const MaxUnheldWaiting = 256

// parking holds the UDP queries that wait for an unheld service.
type parking struct {
	n    atomic.Int32
	wg   sync.WaitGroup
	once sync.Once
	stop chan struct{} // closed when the server stops: waiting queries are dropped
}

// waitUnheld waits for ch, at most UnheldWait, or until stop is closed;
// it reports whether the server is stopping.
func (s *Server) waitUnheld(ch <-chan struct{}, stop <-chan struct{}) (stopping bool) {
	t := time.NewTimer(s.cfg.UnheldWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-stop:
		return true
	}
	return false
}

// parkUDP holds a UDP query (its datagram, sender and reply control
// message, all copied) until ch is closed or UnheldWait has passed, then
// answers it from the table of that moment and sends the answer on its
// own batch I/O. It reports false, holding nothing, when
// MaxUnheldWaiting queries wait already.
func (s *Server) parkUDP(newIO func() udpIO, pkt []byte, peer udpPeer, oob []byte, ch <-chan struct{}) bool {
	if s.parked.n.Add(1) > MaxUnheldWaiting {
		s.parked.n.Add(-1)
		return false
	}
	start := time.Now()
	pkt, oob = append([]byte(nil), pkt...), append([]byte(nil), oob...)
	s.parked.wg.Add(1)
	go func() {
		defer s.parked.wg.Done()
		defer s.parked.n.Add(-1)
		if s.waitUnheld(ch, s.parked.stop) {
			return
		}
		var scratch [256]byte
		remote := peer.addr()
		req, ok := parseQuery(pkt, scratch[:], remote)
		if !ok {
			var r dns.Msg
			if r.Unpack(pkt) != nil {
				return // it parsed when it came
			}
			req = requestOf(&r, remote, false)
		}
		req.waited = true
		buf := make([]byte, int(s.cfg.UDPSize)+headerLen)
		resp, rcode, qtype := s.answer(&req, buf)
		if _, err := newIO().writeBatch([]udpMsg{{buf: resp, oob: oob, peer: peer}}); err != nil {
			s.log.Debug("sending a DNS answer that waited", "to", &peer, "err", err)
			s.m.sendErrors.Inc()
		}
		s.m.observe(qtype, rcode, time.Since(start))
	}()
	return true
}

// stopParking drops the queries still waiting and waits for their
// goroutines.
func (s *Server) stopParking() {
	s.parked.once.Do(func() { close(s.parked.stop) })
	s.parked.wg.Wait()
}
