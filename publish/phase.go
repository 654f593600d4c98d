package publish

// Phase is the step of its round the loop is in (Config.OnPhase).
// A withdrawal applied while the loop is idle is published at once, one
// applied during the evaluation at its next pause; one applied during a
// catalog refresh or a table build waits for the build to end (the
// table it builds has it).
type Phase uint8

// The phases of a round, in order: a round is Refresh, Evaluate, Refresh
// again (what the evaluation committed and what was applied meanwhile)
// and Build; then the loop is Idle until the next.
const (
	// PhaseIdle: between rounds, waiting for the next tick, a withdrawal
	// or a nudge.
	PhaseIdle Phase = iota
	// PhaseRefresh: re-reading the store replica into the catalog.
	PhaseRefresh
	// PhaseEvaluate: the Round's work, which health enters: the live
	// set, the probe targets and, on the leader, the evaluation and its
	// commit. A loop run without a Round never enters it.
	PhaseEvaluate
	// PhaseBuild: writing the next status table from the catalog.
	PhaseBuild
)

func (p Phase) String() string {
	switch p {
	case PhaseIdle:
		return "idle"
	case PhaseRefresh:
		return "refresh"
	case PhaseEvaluate:
		return "evaluate"
	case PhaseBuild:
		return "build"
	}
	return "unknown"
}

// Enter records that the loop enters phase p and tells Config.OnPhase;
// it returns the phase the loop was in. Only the loop's goroutine calls
// it (the round Tick runs among it). Without OnPhase it costs a field
// write.
func (n *Node) Enter(p Phase) Phase {
	prev := n.phase
	n.phase = p
	if f := n.cfg.OnPhase; f != nil && p != prev {
		f(p)
	}
	return prev
}
