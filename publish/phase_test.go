package publish

import "testing"

func TestPhaseString(t *testing.T) {
	for p, want := range map[Phase]string{PhaseIdle: "idle", PhaseRefresh: "refresh", PhaseEvaluate: "evaluate",
		PhaseBuild: "build", Phase(9): "unknown"} {
		if got := p.String(); got != want {
			t.Errorf("Phase(%d).String() = %q, want %q", p, got, want)
		}
	}
}
