package peer

import (
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// Status reports each region followed, in the order given.
func (p *Peers) Status() []wire.PeerRegion {
	snap := p.Current()
	out := make([]wire.PeerRegion, 0, len(p.regions))
	for i, r := range p.regions {
		st := r.agent.Status(p.cfg.StaleAfter)
		age := max(p.cfg.Now().Sub(r.agent.LastSync()), 0)
		pr := wire.PeerRegion{Region: r.name, Servers: p.cfg.Regions[i].Servers, Server: st.Server, Connected: st.Connected,
			Stale: st.Restored || age > p.cfg.StaleAfter, AgeSeconds: age.Round(time.Millisecond).Seconds(), Restored: st.Restored,
			Services: len(st.Views), Instances: snap.count(r.name), LoadError: st.LoadError}
		for _, v := range st.Views {
			pr.Revision = max(pr.Revision, v.Revision)
		}
		out = append(out, pr)
	}
	return out
}

// count returns how many of s's instances are in region.
func (s *Snapshot) count(region string) int {
	n := 0
	for _, ins := range s.services {
		for i := range ins {
			if ins[i].Region == region {
				n++
			}
		}
	}
	return n
}
