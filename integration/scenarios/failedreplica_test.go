package scenarios

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
)

// probeWithdrawal is the longest from a replica refusing until the
// leader withdraws it, part by part: its next probe (a check interval,
// jittered by up to 10%; a refused connection answers at once and
// withdraws at once, SPEC §2's fast path), the prober's batch to the
// leader, and the leader's evaluation round.
func probeWithdrawal(cfg Config) (time.Duration, string) {
	next := time.Duration(probeJitter * float64(cfg.CheckInterval))
	return next + probeBatch + evalRound, fmt.Sprintf("next probe %s (interval %s + 10%% jitter) + prober batch %s + evaluation round %s",
		next, cfg.CheckInterval, probeBatch, evalRound)
}

// failedBudget is, per population, the time from the fault until 99% of
// its callers that sent to the replica stop: the leader's withdrawal
// (probeWithdrawal), then its delivery to the population. A grpc-go
// caller's own figure is client-side (it drops a refused subchannel by
// itself) and is held to the same budget as its assignment.
func failedBudget(cfg Config) func(callers.Kind) (time.Duration, string) {
	return func(k callers.Kind) (time.Duration, string) {
		w, _ := probeWithdrawal(cfg)
		d, why := delivery(k)
		return w + d, fmt.Sprintf("probe withdrawal %s + %s", w.Round(10*time.Millisecond), why)
	}
}

// TestFailedReplica is experiment 2's first half: on the region, a
// population of synthetic callers per client kind (DNS direct, DNS via
// the agents, Envoy, grpc-go), each with a token of its own and
// reporting its outcomes, calls a service at a steady rate; then one
// zone-a replica of each called service fails hard (its listener
// refuses). Per kind it measures the time from the fault until 99% of
// the callers that sent to it stopped, and for the xDS kinds until it
// left 99% of the assignments they hold; the error rate over time; and
// that the leader's audit event withdrew it on probe evidence (the
// refused probe, SPEC §2's hard-failure fast path).
func TestFailedReplica(t *testing.T) {
	res := NewResult("failed-replica", "One replica failed hard: its listener refuses (experiment 2, first half)")
	run := startReplicaRun(t, res, nil)
	r, cfg := run.r, run.cfg

	fault := time.Now()
	for _, v := range run.victims {
		if err := r.Fleet.SetIDs(run.ctx, fleet.ModeRefuse, 0, v.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Until the leader's audit trail shows both withdrawals and every
	// figure has converged, then 5 s more for the error rate after it,
	// or the poll's deadline.
	events := run.awaitWithdrawn(fault, failedBudget(cfg), nil)
	end := time.Now()
	run.pop.Stop()
	run.replicaFigures(res, "Caller error rate per second (callers that sent to the replica), one replica refusing", fault, end, failedBudget(cfg))

	bound, why := probeWithdrawal(cfg)
	for _, name := range []string{run.httpSvc.Name, run.grpcSvc.Name} {
		v := run.victims[name]
		class, e := run.withdrawalRow(res, name, fault, bound, why, events)
		// Both are cairn withdrawing it on evidence; which came first
		// is a race at full size (the next probe may be 5.5 s away,
		// the callers' quorum takes about 4 s), and the row says which.
		res.Add(fmt.Sprintf("%s: the withdrawal's evidence class (audit event)", v.ID), "probe (the refused probe, §2's fast path), or outcome if the callers' quorum came first",
			fmt.Sprintf("%s: %s", class, e.Reason), class == "probe" || class == "outcome")
		reasons, err := run.reasons(name, v)
		hard := slices.ContainsFunc(reasons, func(s string) bool { return strings.Contains(s, "hard failure (connection refused)") })
		if err != nil {
			reasons = []string{err.Error()}
		}
		res.Add(fmt.Sprintf("%s: the refused probe among the reasons (leader, at the end)", v.ID), "probe failing: hard failure (connection refused)",
			strings.Join(reasons, "; "), hard)
	}
	res.Note("a grpc-go caller stops by itself: the refused connection takes the subchannel out of its picker before cairn withdraws the instance; its assignment's figure is cairn's")
	res.Report(t)
}
