package store

import (
	"context"
	"fmt"
	"net"

	"github.com/hashicorp/raft"

	"github.com/cairn-sd/cairn/wire"
)

// Members returns the servers of the raft configuration with the
// addresses recorded for them.
func (s *Store) Members() ([]wire.Member, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("store: reading raft configuration: %w", err)
	}
	_, lid := s.raft.LeaderWithID()
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	var out []wire.Member
	for _, srv := range f.Configuration().Servers {
		m := s.fsm.members[string(srv.ID)]
		m.NodeID = string(srv.ID)
		m.RaftAddr = string(srv.Address)
		m.Voter = srv.Suffrage == raft.Voter
		m.Leader = srv.ID == lid
		out = append(out, m)
	}
	return out, nil
}

// Join adds m as a voter (or updates its address) and records its HTTP
// address. Only the leader can.
func (s *Store) Join(ctx context.Context, actor string, m wire.Member) error {
	if err := wire.CheckLabel("node_id", m.NodeID); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(m.RaftAddr); err != nil {
		return invalid("raft_addr", "%q is not host:port", m.RaftAddr)
	}
	if _, _, err := net.SplitHostPort(m.HTTPAddr); err != nil {
		return invalid("http_addr", "%q is not host:port", m.HTTPAddr)
	}
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	if err := s.raft.AddVoter(raft.ServerID(m.NodeID), raft.ServerAddress(m.RaftAddr), 0, timeoutOf(ctx)).Error(); err != nil {
		return fmt.Errorf("store: adding voter %q: %w", m.NodeID, s.raftErr(err))
	}
	_, err := s.propose(ctx, command{Op: opSetMember, Actor: actor, Member: &m})
	return err
}

// Leave removes a server from the cluster.
func (s *Store) Leave(ctx context.Context, actor, nodeID string) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	ms, err := s.Members()
	if err != nil {
		return err
	}
	found := false
	for _, m := range ms {
		found = found || m.NodeID == nodeID
	}
	if !found {
		// Already gone: a retried leave succeeds, as it did the first time.
		return nil
	}
	del := func() error {
		_, err := s.propose(ctx, command{Op: opDelMember, Actor: actor, Member: &wire.Member{NodeID: nodeID}})
		return err
	}
	// A leader that removes itself can commit nothing afterwards, so it
	// forgets its address first; for any other node the address goes only
	// once the node is out, so a failed removal leaves it reachable.
	if nodeID == s.cfg.NodeID {
		if err := del(); err != nil {
			return err
		}
	}
	if err := s.raft.RemoveServer(raft.ServerID(nodeID), 0, timeoutOf(ctx)).Error(); err != nil {
		return fmt.Errorf("store: removing %q: %w", nodeID, s.raftErr(err))
	}
	if nodeID != s.cfg.NodeID {
		return del()
	}
	return nil
}
