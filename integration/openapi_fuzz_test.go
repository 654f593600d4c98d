package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// TestOpenAPIFuzz runs schemathesis against a real `cairn server --dev`,
// generating requests from the document the server serves
// (GET /v1/openapi.json, docs/openapi.yaml): with ACLs off, with ACLs on
// as an admin, and with ACLs on as a reader of one namespace (every
// write refused). It checks, beside schemathesis' own checks (no 5xx,
// answers as the document says), the ones in
// testdata/schemathesis_hooks.py: every error is the JSON body of
// docs/api.md with the code its status carries, and a refused write
// stores nothing.
//
// `make test` runs a short pass (CAIRN_FUZZ_API unset: a few cases an
// operation, the fuzzing and stateful phases); `make fuzz-api` the full
// one (CAIRN_FUZZ_API=full: every phase, CAIRN_FUZZ_API_EXAMPLES cases an
// operation, default 100).
func TestOpenAPIFuzz(t *testing.T) {
	bin := needSchemathesis(t)
	pass := fuzzPass{examples: 5, phases: "examples,fuzzing,stateful", timeout: 5 * time.Minute}
	if os.Getenv(envFuzzAPI) == "full" {
		pass = fuzzPass{examples: 100, phases: "examples,coverage,fuzzing,stateful", timeout: 60 * time.Minute}
		if v := os.Getenv(envFuzzAPIExamples); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("$%s=%q: want a positive number", envFuzzAPIExamples, v)
			}
			pass.examples = n
		}
	}
	const admin, reader = "fuzz-admin-token-0123456789", "fuzz-reader-token-0123456789"
	t.Run("acls-off", func(t *testing.T) {
		c := StartCluster(t, 1, "--dev")
		seedFuzz(t, c)
		pass.run(t, bin, c.Nodes[0].URL(), "", "")
	})
	t.Run("acls-on-admin", func(t *testing.T) {
		c := StartClusterAs(t, admin, 1, "--dev", "--acl-bootstrap-token", admin)
		seedFuzz(t, c)
		// ignored_auth: every operation that needs a token refuses a
		// request without one, or with a wrong one.
		pass.run(t, bin, c.Nodes[0].URL(), admin, admin, "ignored_auth")
	})
	t.Run("acls-on-reader", func(t *testing.T) {
		acls := filepath.Join(t.TempDir(), "acl.yaml")
		body := fmt.Sprintf("tokens:\n  - {secret: %s, scope: admin}\n  - {secret: %s, scope: reader, namespaces: [%s]}\n", admin, reader, testNS)
		if err := os.WriteFile(acls, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c := StartClusterAs(t, admin, 1, "--dev", "--acl-file", acls)
		seedFuzz(t, c)
		// A reader may write nothing but outcomes about its namespace:
		// join and leave are fuzzed too, as they are refused.
		pass.run(t, bin, c.Nodes[0].URL(), reader, admin)
	})
}

const (
	// envFuzzAPI set to "full" makes TestOpenAPIFuzz the full pass.
	envFuzzAPI = "CAIRN_FUZZ_API"
	// envFuzzAPIExamples is the full pass's cases per operation.
	envFuzzAPIExamples = "CAIRN_FUZZ_API_EXAMPLES"
	// EnvSchemathesis names a schemathesis binary to run instead of the
	// one scripts/install-schemathesis.sh installs.
	EnvSchemathesis     = "CAIRN_SCHEMATHESIS"
	installSchemathesis = "scripts/install-schemathesis.sh"
)

// fuzzService is what seedFuzz applies: the shop/cart that
// testdata/schemathesis.toml points a share of the requests at.
const fuzzService = `namespace: shop
name: cart
ports: [{name: http, number: 8080}, {name: admin, number: 9090}]
capability: {readiness: self, dependencies: [{name: db, shared: false}]}
policy: {drain_window: 1h, lease_ttl: 10m}
`

// seedFuzz applies fuzzService and registers its instance web-1
// (incarnation 1).
func seedFuzz(t *testing.T, c *Cluster) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	cl := c.Nodes[0].Client()
	if _, err := cl.Apply(ctx, []byte(fuzzService)); err != nil {
		t.Fatal(err)
	}
	reg := wire.Registration{ID: "web-1", Addresses: []string{"10.0.0.1"}, Ports: map[string]int{"http": 8080}}
	if _, err := cl.Register(ctx, testNS, testSvc, reg); err != nil {
		t.Fatal(err)
	}
}

// fuzzPass is how much one schemathesis run does.
type fuzzPass struct {
	examples int
	phases   string
	timeout  time.Duration
}

// run runs schemathesis against base with token (none: ACLs off); the
// hooks read the store with readToken. Extra checks are added to the
// common ones. It fails the test when schemathesis reports a failure or
// an error, with its report.
func (p fuzzPass) run(t *testing.T, bin, base, token, readToken string, checks ...string) {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	td := filepath.Join(root, "integration", "testdata")
	checks = append([]string{"not_a_server_error", "status_code_conformance", "content_type_conformance",
		"response_schema_conformance", "unsupported_method", "allow_header_conformance",
		"error_body_per_api_md", "refused_write_stores_nothing"}, checks...)
	args := []string{"--config-file", filepath.Join(td, "schemathesis.toml"), "run", base + "/v1/openapi.json",
		"--url", base, "--checks", strings.Join(checks, ","),
		"--phases", p.phases, "--max-examples", strconv.Itoa(p.examples),
		// One request at a time: the hooks compare the store before
		// and after each refused write.
		"--workers", "1",
		"--generation-with-security-parameters", "false", "--generation-database", "none",
		"--request-timeout", "30", "--no-color"}
	if token != "" {
		args = append(args, "--header", "Authorization: Bearer "+token)
	} else {
		// With ACLs off a token is not looked at: schemathesis' auth
		// checks would only find it ignored, as it is meant to be.
		args = append(args, "--exclude-checks", "ignored_auth")
	}
	if token == readToken {
		// An admin's joins and leaves would change the cluster under the
		// run (a made-up voter costs a one-node cluster its quorum), so
		// they are fuzzed only in the reader's pass, where they are
		// refused.
		args = append(args, "--exclude-operation-id", "join", "--exclude-operation-id", "leave")
	}
	ctx, cancel := context.WithTimeout(t.Context(), p.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir() // schemathesis' own files stay out of the tree
	cmd.Env = append(os.Environ(), "SCHEMATHESIS_HOOKS="+filepath.Join(td, "schemathesis_hooks.py"),
		"CAIRN_FUZZ_URL="+base, "CAIRN_FUZZ_TOKEN="+readToken)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(time.Second)
	text := string(out)
	cases := regexp.MustCompile(`(\d+) generated`).FindStringSubmatch(text)
	n := "?"
	if cases != nil {
		n = cases[1]
	}
	t.Logf("schemathesis: %s cases in %s (%d an operation, phases %s)", n, took, p.examples, p.phases)
	if dir := os.Getenv(EnvArtifacts); dir != "" {
		name := strings.ReplaceAll(t.Name(), "/", "_") + "-schemathesis.txt"
		if werr := os.WriteFile(filepath.Join(dir, name), out, 0o644); werr != nil {
			t.Errorf("keeping schemathesis' report: %v", werr)
		}
	}
	if err != nil {
		t.Fatalf("schemathesis %s: %v\n%s", strings.Join(args, " "), err, text)
	}
}

// SchemathesisBinary returns the schemathesis to run: $CAIRN_SCHEMATHESIS
// if set, else the one scripts/install-schemathesis.sh installs, of the
// version it pins. The error says how to get one.
func SchemathesisBinary() (string, error) {
	if p := os.Getenv(EnvSchemathesis); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s=%q: %w", EnvSchemathesis, p, err)
		}
		return p, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, installSchemathesis)
	out, err := exec.Command(script, "--path").Output()
	if err != nil {
		return "", fmt.Errorf("%s --path: %w", installSchemathesis, err)
	}
	bin := strings.TrimSpace(string(out))
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no schemathesis at %s (scripts/install-schemathesis.sh installs it there)", bin)
	}
	return bin, nil
}

// needSchemathesis returns the schemathesis binary, or skips the test
// naming what is missing; under CI=true, where .ci/run installs it, it
// fails.
func needSchemathesis(t *testing.T) string {
	t.Helper()
	needProcesses(t)
	bin, err := SchemathesisBinary()
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v; under CI=true a missing schemathesis fails the test", err)
	}
	t.Skipf("skipped: %v", err)
	return ""
}
