package cmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Secrets of the ACL files the tests write.
const (
	testProberN2 = "prober-n2-0123456789abcdef"
	testReader   = "reader-shop-0123456789abcd"
)

// TestServerRefusesBadProbeToken: `cairn server` with another node's
// prober token, or an ACL file that binds a node to a token of another
// scope, stops before it listens or writes anything.
func TestServerRefusesBadProbeToken(t *testing.T) {
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "acl.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(aclFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, acl, probeToken string
		code                  int
		want                  string
	}{
		{"another node's prober token", "tokens:\n  - {secret: " + testProberN2 + ", scope: prober, node: n2}\n", testProberN2,
			exitError, "prober token of node n2 may not report as n1"},
		{"node on a reader token", "tokens:\n  - {secret: " + testReader + ", scope: reader, namespaces: [shop], node: n1}\n", "",
			exitUsage, "tokens[0]: node: only a prober token names a node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			write(c.acl)
			data := filepath.Join(t.TempDir(), "data")
			args := []string{"cairn", "server", "--data-dir", data, "--node-id", "n1", "--acl-file", aclFile,
				"--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}
			if c.probeToken != "" {
				args = append(args, "--probe-token", c.probeToken)
			}
			// Were the token accepted, the server would run until this
			// deadline and the exit code would say so.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			code := Run(ctx, args, &out, &errb)
			if code != c.code || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errb.String(), c.code, c.want)
			}
			if c.probeToken != "" && strings.Contains(errb.String(), c.probeToken) {
				t.Errorf("stderr %q repeats the secret", errb.String())
			}
			if ents, err := os.ReadDir(data); err == nil && len(ents) > 0 {
				t.Errorf("the refused server wrote %d entries to its data dir", len(ents))
			}
		})
	}
}
