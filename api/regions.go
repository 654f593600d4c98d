package api

import (
	"fmt"
	"net/http"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/wire"
)

// regions answers GET /v1/regions: this node's region, and the other
// regions it follows with how current its view of each is.
func (s *Server) regions(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ReadCluster, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not list regions: %w", id.Scope, acl.ErrDenied)
	}
	out := wire.Regions{Region: s.cfg.Region, Peers: []wire.PeerRegion{}}
	if s.cfg.Peers != nil {
		out.Peers = append(out.Peers, s.cfg.Peers()...)
	}
	if s.cfg.Signal != nil {
		out.Signal = s.cfg.Signal()
	}
	return http.StatusOK, out, nil
}

// peerRegions is the set of the regions this node follows.
func (s *Server) peerRegions() map[string]bool {
	if s.cfg.Peers == nil {
		return nil
	}
	out := map[string]bool{}
	for _, r := range s.cfg.Peers() {
		out[r.Region] = true
	}
	return out
}
