package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// AdminToken is the region's admin token: the harness's clients and
// CLI runs (integration.Config.Token) and the servers' joins. The
// servers probe with a prober token each (ProberToken) and the agents
// subscribe with a reader token each (AgentToken), as SPEC §8 scopes
// them.
const AdminToken = "sim-admin-token-0123456789abcdefgh"

// callerToken is the reader token of the i-th synthetic caller.
func callerToken(i int) string { return fmt.Sprintf("sim-caller-%04d-0123456789abcdefgh", i) }

// ProberToken is the prober token of server node (its --node-id, n1 to
// n3): bound to that node, so it may send that server's probe results
// (and the outcomes its xDS subscribers report over LRS) and no other's.
func ProberToken(node string) string { return "sim-prober-" + node + "-0123456789abcdefgh" }

// AgentToken is the reader token of zone z's agent: it may subscribe to
// the region's namespace over xDS, nothing more.
func AgentToken(z string) string { return "sim-agent-" + z + "-0123456789abcdefgh" }

// CallerToken returns the i-th synthetic caller's own token (from 0, up
// to Config.Callers): a reader of the region's namespace, so that each
// caller is one observer in the outcome quorum. It panics past
// Config.Callers, a scenario's bug.
func (r *Region) CallerToken(i int) string {
	if i < 0 || i >= r.Callers {
		panic(fmt.Sprintf("scenarios: CallerToken(%d): the region has %d caller tokens (Config.Callers)", i, r.Callers))
	}
	return callerToken(i)
}

// nodeID is the --node-id the harness gives server i (from 1).
func nodeID(i int) string { return fmt.Sprintf("n%d", i) }

// aclYAML is the servers' --acl-file: the admin token, a prober token
// per server, a reader of Namespace per agent and one per caller.
func aclYAML(callers int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tokens:\n- {secret: %s, scope: admin}\n", AdminToken)
	for i := range Zones() {
		fmt.Fprintf(&b, "- {secret: %s, scope: prober, node: %s}\n", ProberToken(nodeID(i+1)), nodeID(i+1))
	}
	for _, z := range Zones() {
		fmt.Fprintf(&b, "- {secret: %s, scope: reader, namespaces: [%s]}\n", AgentToken(z), Namespace)
	}
	for i := range callers {
		fmt.Fprintf(&b, "- {secret: %s, scope: reader, namespaces: [%s]}\n", callerToken(i), Namespace)
	}
	return b.String()
}

// writeACL writes the ACL file into dir and returns the servers' flags
// that enable it (each server's --probe-token is its own: serverArgs).
func writeACL(dir string, callers int) ([]string, error) {
	f := filepath.Join(dir, "acl.yaml")
	if err := os.WriteFile(f, []byte(aclYAML(callers)), 0o600); err != nil {
		return nil, err
	}
	return []string{"--acl-file", f}, nil
}

// serverArgs are server i's own flags (from 1): its zone, and its
// prober token.
func serverArgs(i int) []string {
	return []string{"--region", RegionName, "--zone", Zones()[i-1], "--probe-token", ProberToken(nodeID(i))}
}
