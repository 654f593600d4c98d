package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// AdminToken is the region's admin token: the harness's clients and
// CLI runs (integration.Config.Token), the servers' probe reports
// (--probe-token) and the agents' subscriptions use it.
const AdminToken = "sim-admin-token-0123456789abcdefgh"

// callerToken is the reader token of the i-th synthetic caller.
func callerToken(i int) string { return fmt.Sprintf("sim-caller-%04d-0123456789abcdefgh", i) }

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

// aclYAML is the servers' --acl-file: the admin token and one reader of
// Namespace per caller.
func aclYAML(callers int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tokens:\n- {secret: %s, scope: admin}\n", AdminToken)
	for i := range callers {
		fmt.Fprintf(&b, "- {secret: %s, scope: reader, namespaces: [%s]}\n", callerToken(i), Namespace)
	}
	return b.String()
}

// writeACL writes the ACL file into dir and returns the servers' flags
// that enable it.
func writeACL(dir string, callers int) ([]string, error) {
	f := filepath.Join(dir, "acl.yaml")
	if err := os.WriteFile(f, []byte(aclYAML(callers)), 0o600); err != nil {
		return nil, err
	}
	return []string{"--acl-file", f, "--probe-token", AdminToken}, nil
}
