package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The agent's deploy files (deploy/systemd/cairn-agent.service,
// deploy/systemd-resolved/cairn-agent.conf) cannot run here: systemd is
// not PID 1. They are checked statically, with systemd's own tools where
// they work offline, and against the binary.

// The agent's defaults the deploy files name (SPEC §5).
const (
	agentDNSDefault  = "127.0.0.1:8054"
	agentHTTPDefault = "127.0.0.1:8490"
	agentUnitPath    = "systemd/cairn-agent.service"
	// agentUnitBin is where the unit expects the agent's binary,
	// cairn-agent.
	agentUnitBin = "/usr/local/bin/cairn-agent"
)

// TestAgentDefaultsMatchBinary: the defaults the agent's deploy files
// name are the binary's.
func TestAgentDefaultsMatchBinary(t *testing.T) {
	needProcesses(t)
	checkDefaults(t, "agent", map[string]string{"dns-addr": agentDNSDefault, "http-addr": agentHTTPDefault, "domain": dnsZone})
}

// TestAgentSystemdResolvedSnippet: the agent's drop-in sends
// cairn.internal, and only it, to the agent's default DNS address (see
// TestDNSSystemdResolvedSnippet).
func TestAgentSystemdResolvedSnippet(t *testing.T) {
	checkResolvedDropIn(t, "systemd-resolved/cairn-agent.conf", agentDNSDefault)
}

// unitFile is a systemd unit as systemd.syntax(7) reads it: sections of
// KEY=VALUE lines, a trailing backslash continuing a line; a key may
// repeat.
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, b []byte) unitFile {
	t.Helper()
	u := unitFile{}
	section := ""
	var cont strings.Builder
	for i, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if cont.Len() == 0 && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";")) {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cont.WriteString(l + " ")
			continue
		}
		cont.WriteString(line)
		line = cont.String()
		cont.Reset()
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s line %d: %q is neither a section, a comment nor KEY=VALUE in a section", agentUnitPath, i+1, raw)
		}
		u[section][k] = append(u[section][k], v)
	}
	return u
}

// one returns the single value of section's key, or fails the test.
func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	vs := u[section][key]
	if len(vs) != 1 {
		t.Fatalf("%s: [%s] %s= is set %d times; want once", agentUnitPath, section, key, len(vs))
	}
	return vs[0]
}

// TestAgentSystemdUnit checks deploy/systemd/cairn-agent.service: what it
// runs (cairn-agent with flags the binary has, its views in the state
// directory systemd makes for a dynamic user, on the addresses the
// resolver drop-in and the binary agree on), that it restarts always,
// that systemd-analyze verify finds nothing wrong with it, and that its
// hardening keeps systemd-analyze security's exposure at 2.0 or below.
func TestAgentSystemdUnit(t *testing.T) {
	needProcesses(t)
	b, err := os.ReadFile(filepath.Join("..", "deploy", agentUnitPath))
	if err != nil {
		t.Fatal(err)
	}
	u := parseUnit(t, b)
	for _, kv := range []struct{ section, key, want string }{
		{"Service", "Restart", "always"},
		{"Service", "DynamicUser", "yes"},
		{"Service", "StateDirectory", "cairn-agent"},
		{"Unit", "StartLimitIntervalSec", "0"},
		{"Install", "WantedBy", "multi-user.target"},
	} {
		if got := u.one(t, kv.section, kv.key); got != kv.want {
			t.Errorf("%s: [%s] %s=%s; want %s", agentUnitPath, kv.section, kv.key, got, kv.want)
		}
	}

	// ExecStart: the agent, each flag one the binary has, and its data
	// in the state directory.
	argv := strings.Fields(u.one(t, "Service", "ExecStart"))
	if len(argv) < 2 || argv[0] != agentUnitBin {
		t.Fatalf("%s: ExecStart=%s; want %s ...", agentUnitPath, strings.Join(argv, " "), agentUnitBin)
	}
	bin, err := AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("cairn-agent --help: %v\n%s", err, help)
	}
	flags := map[string][]string{}
	for i := 1; i < len(argv); i++ {
		name, ok := strings.CutPrefix(argv[i], "--")
		if !ok || i+1 == len(argv) {
			t.Fatalf("%s: ExecStart: %q is not a --flag followed by its value", agentUnitPath, argv[i])
		}
		if !regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(name) + `\b`).Match(help) {
			t.Errorf("%s: ExecStart passes --%s, which `cairn-agent --help` does not list", agentUnitPath, name)
		}
		flags[name] = append(flags[name], argv[i+1])
		i++
	}
	for name, want := range map[string]string{"data-dir": "${STATE_DIRECTORY}", "dns-addr": agentDNSDefault, "http-addr": agentHTTPDefault} {
		if got := flags[name]; !slices.Equal(got, []string{want}) {
			t.Errorf("%s: ExecStart --%s %v; want %s", agentUnitPath, name, got, want)
		}
	}
	if len(flags["server"]) == 0 {
		t.Errorf("%s: ExecStart names no --server", agentUnitPath)
	}

	// systemd's own checks, on a copy that runs the binary under test:
	// verify wants ExecStart's binary to exist.
	analyze := needTool(t, "systemd-analyze", "systemd")
	unit := filepath.Join(t.TempDir(), "cairn-agent.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte(agentUnitBin+" "), []byte(bin+" ")), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, "verify", unit).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// verify reports unknown keys and bad values as warnings and still
	// succeeds: any line about the unit is a failure. (Lines about the
	// host's own units, which verify loads too, are not.)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "cairn-agent.service") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	// The threshold is in tenths: 20 is an exposure of 2.0.
	out, err = exec.CommandContext(ctx, analyze, "security", "--offline=true", "--threshold=20", unit).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: %v; want an exposure of 2.0 or below\n%s", err, out)
	}
	if m := regexp.MustCompile(`Overall exposure level for \S+: (.*)`).FindSubmatch(out); m != nil {
		t.Logf("systemd-analyze security: exposure %s", m[1])
	}
}
