package store

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
	"github.com/hashicorp/raft"
)

// TestLeaderForgetsReplicatedRenewals: once a checkpoint has replicated a
// renewal, the leader no longer holds it in memory (the replica has its
// deadline), and the deadline it reports does not move back.
func TestLeaderForgetsReplicatedRenewals(t *testing.T) {
	_, trans := raft.NewInmemTransport("n1:8300")
	s, err := Open(Config{NodeID: "n1", Transport: trans, Bootstrap: true,
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond, LeaderLease: 50 * time.Millisecond,
		LeaseCheckpoint: time.Hour, // the test checkpoints by hand
		Logger:          slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !s.LeaderReady() {
		if time.Now().After(deadline) {
			t.Fatal("no ready leader after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	svc := webService()
	if _, err := s.ApplyServices(ctx, "test", []wire.Service{svc}); err != nil {
		t.Fatal(err)
	}
	held := func() int {
		s.leaseMu.Lock()
		defer s.leaseMu.Unlock()
		return len(s.leases)
	}
	var renewed []wire.Instance
	for _, id := range []string{"a", "b"} {
		in, _, err := s.Register(ctx, "test", wire.Registration{Namespace: "prod", Service: "web", ID: id,
			Addresses: []string{"10.0.0.1"}, Ports: map[string]int{"http": 8080}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Renew(ctx, in.Key(), in.Incarnation)
		if err != nil {
			t.Fatal(err)
		}
		renewed = append(renewed, r)
	}
	if n := held(); n != 2 {
		t.Fatalf("leader holds %d renewals before the checkpoint, want 2", n)
	}

	s.leaseMu.Lock()
	c := []leaseUpdate{s.leases[webKey("a")], s.leases[webKey("b")]}
	s.leaseMu.Unlock()
	more, err := s.housekeepOnce(ctx)
	if err != nil || more {
		t.Fatalf("housekeepOnce = %t, %v", more, err)
	}
	if n := held(); n != 0 {
		t.Errorf("leader holds %d renewals after the checkpoint, want 0", n)
	}
	for i, r := range renewed {
		got, _ := s.Instance(r.Key())
		if !got.LeaseDeadline.Equal(c[i].Deadline) || !got.LeaseDeadline.Equal(r.LeaseDeadline) {
			t.Errorf("%s: deadline %v after the checkpoint, want %v", r.ID, got.LeaseDeadline, r.LeaseDeadline)
		}
	}
}

// TestHeldRenewalMapsShrink: once the renewals held fall under a quarter
// of their peak, the maps are made anew at their current size, with the
// same contents.
func TestHeldRenewalMapsShrink(t *testing.T) {
	s := &Store{leases: map[wire.InstanceKey]leaseUpdate{}, dirty: map[wire.InstanceKey]bool{}}
	for i := range 4 * minLeasesShrunk {
		k := webKey(fmt.Sprint("i", i))
		s.leases[k] = leaseUpdate{fence: fence{k, 1}}
		s.dirty[k] = i%2 == 0
		s.leasesPeak = max(s.leasesPeak, len(s.leases))
	}
	old := s.leases
	for k := range old {
		if k.ID != "i0" && k.ID != "i1" {
			delete(s.leases, k)
			delete(s.dirty, k)
		}
	}
	s.shrinkLeases()
	if sameMap(s.leases, old) || s.leasesPeak != 2 {
		t.Fatalf("maps not made anew (peak %d)", s.leasesPeak)
	}
	if len(s.leases) != 2 || !s.dirty[webKey("i0")] || s.dirty[webKey("i1")] || len(s.dirty) != 2 {
		t.Errorf("leases %v, dirty %v after shrinking", s.leases, s.dirty)
	}
	s.shrinkLeases() // a small peak: left alone
	if s.leasesPeak != 2 {
		t.Errorf("peak %d after a second shrink, want 2", s.leasesPeak)
	}
}
