package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/xdsserver"
)

// TestTLSCommands: the two commands of the README make a CA and
// certificates a server loads; they never overwrite a file.
func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := run(t, "tls", "ca", "create", "--dir", dir); code != exitOK {
		t.Fatalf("ca create: %d %s", code, stderr)
	}
	ca, caKey := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	if code, _, stderr := run(t, "tls", "ca", "create", "--dir", dir); code != exitError || !strings.Contains(stderr, "exists: not replaced") {
		t.Fatalf("second ca create: %d %s", code, stderr)
	}
	certArgs := []string{"tls", "cert", "create", "--dir", dir, "--ca", ca, "--ca-key", caKey}
	for i := range 2 {
		code, out, stderr := run(t, append(certArgs, "--server", "--ip", "10.1.2.3", "--dns", "cairn-1.example")...)
		if code != exitOK || !strings.Contains(out, filepath.Join(dir, "server-cairn-"+string(rune('0'+i))+".pem")) {
			t.Fatalf("server cert %d: %d %q %s", i, code, out, stderr)
		}
	}
	if code, _, stderr := run(t, append(certArgs, "--client", "--name", "ops")...); code != exitOK {
		t.Fatalf("client cert: %d %s", code, stderr)
	}
	if k, err := os.Stat(filepath.Join(dir, "ops-key.pem")); err != nil || k.Mode().Perm() != 0o600 {
		t.Fatalf("client key: %v %v", k, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", "--client"}, "give one of --server or --client"},
		{[]string{}, "give one of --server or --client"},
		{[]string{"--server", "--ip", "ten"}, `--ip: "ten" is not an IP address`},
		{[]string{"--client", "--dns", "server.cairn"}, "may not carry it"},
		{[]string{"--server", "--validity", "87600h"}, "the CA expires"},
	} {
		if code, _, stderr := run(t, append(certArgs, tc.args...)...); code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("cert create %v: %d %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
	if code, _, stderr := run(t, "tls", "cert", "create", "--server", "--dir", dir, "--ca", filepath.Join(dir, "none.pem")); code != exitUsage || !strings.Contains(stderr, "--ca: open") {
		t.Errorf("missing CA: %d %q", code, stderr)
	}

	// What the server says about its TLS flags, before it opens anything.
	srv := filepath.Join(dir, "server-cairn-0.pem")
	srvKey := filepath.Join(dir, "server-cairn-0-key.pem")
	otherKey := filepath.Join(dir, "server-cairn-1-key.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", srv, "--tls-key", srvKey}, "give all three or none"},
		{[]string{"--tls-cert", srv, "--tls-key", otherKey, "--tls-ca", ca}, "--tls-cert " + srv + " and --tls-key " + otherKey + ": not a certificate and its key"},
		{[]string{"--tls-cert", srv, "--tls-key", srvKey, "--tls-ca", ca, "--insecure-plaintext"}, "choose one"},
		{[]string{"--http-addr", "0.0.0.0:0", "--acl-bootstrap-token", "0123456789abcdef0123"}, "--http-addr 0.0.0.0:0 is reachable beyond this host, so TLS must be on"},
		{[]string{"--raft-addr", "10.1.2.3:0"}, "--raft-addr 10.1.2.3:0 is reachable beyond this host, so TLS must be on"},
		{[]string{"--grpc-addr", ":8481"}, "--grpc-addr :8481 is reachable beyond this host"},
	} {
		wantServerUsage(t, tc.args, tc.want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", srv, "--tls-key", srvKey}, "--tls-ca: required"},
		{[]string{"--tls-cert", srv, "--tls-ca", ca}, "give both or neither"},
	} {
		args := append([]string{"agent", "--dev", "--server", "127.0.0.1:1"}, tc.args...)
		if code, _, stderr := run(t, args...); code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("cairn %v: %d %q, want %q", args, code, stderr, tc.want)
		}
	}
	if code, _, stderr := run(t, "--ca-file", filepath.Join(dir, "none.pem"), "services"); code != exitUsage || !strings.Contains(stderr, "--ca-file: open") {
		t.Errorf("CLI with a missing CA: %d %q", code, stderr)
	}
}

// TestDNSProtectionFlags: what the server says about its DNS
// rate-limiting and cookie flags, before it opens anything.
func TestDNSProtectionFlags(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secrets, []byte("00112233445566778899aabbccddeeff\nnot-hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dns-rrl", "sometimes"}, `--dns-rrl: "sometimes" is not auto, on or off`},
		{[]string{"--dns-cookies", "yes"}, `--dns-cookies: "yes" is not auto, on or off`},
		{[]string{"--dns-rrl-rate", "0"}, "--dns-rrl-rate: 0 is not between 1 and 1000000000"},
		{[]string{"--dns-rrl-slip", "-1"}, "--dns-rrl-slip: -1 is not between 0 and 100"},
		{[]string{"--dns-rrl-exempt", "10.0.0.0"}, `--dns-rrl-exempt: "10.0.0.0" is not a CIDR`},
		{[]string{"--dns-cookie-secret-file", secrets}, "line 2 is not 32 hex digits"},
		{[]string{"--dns-cookie-secret-file", filepath.Join(dir, "none")}, "--dns-cookie-secret-file: open"},
	} {
		wantServerUsage(t, tc.args, tc.want)
	}
}

// wantServerUsage runs cairn server with args and wants a usage error
// saying want, and nothing written to its data dir.
func wantServerUsage(t *testing.T, args []string, want string) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	args = append([]string{"server", "--data-dir", data}, args...)
	if code, _, stderr := run(t, args...); code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("cairn %v: %d %q, want %q", args, code, stderr, want)
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("cairn %v wrote its data dir", args)
	}
}

// TestXDSLimitFlags: a negative xDS cap is refused, naming the flag and
// what 0 means, before the server opens anything.
func TestXDSLimitFlags(t *testing.T) {
	for _, f := range []string{"xds-max-names-per-stream", "xds-max-types-per-stream", "xds-max-streams-per-token", "xds-max-streams-per-address"} {
		wantServerUsage(t, []string{"--" + f, "-1"}, "--"+f+": -1 is negative (0 turns the cap off)")
	}
}

// TestXDSLimitValues: a cap's flag reaches xdsserver as given, 0 as "no
// cap" (xdsserver's -1; its own 0 means the default), and an unset flag
// as the default.
func TestXDSLimitValues(t *testing.T) {
	var got xdsserver.Limits
	app := &cli.App{Flags: xdsLimitFlags(), Action: func(c *cli.Context) (err error) {
		got, err = xdsLimits(c)
		return err
	}}
	if err := app.Run([]string{"x", "--xds-max-names-per-stream", "0", "--xds-max-types-per-stream", "7"}); err != nil {
		t.Fatal(err)
	}
	want := xdsserver.Limits{MaxNames: -1, MaxTypes: 7, MaxStreamsPerToken: xdsserver.DefaultMaxStreamsPerToken, MaxStreamsPerAddress: xdsserver.DefaultMaxStreamsPerAddress}
	if got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
}
