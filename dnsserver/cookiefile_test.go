package dnsserver_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
)

// TestReadCookieSecrets: the file gives one secret or two; a missing or
// malformed file is refused with its name and the rule.
func TestReadCookieSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cur, prev, err := dnsserver.ReadCookieSecrets(write("two", "00112233445566778899aabbccddeeff\nffeeddccbbaa99887766554433221100\n"))
	if err != nil || len(cur) != 16 || cur[1] != 0x11 || len(prev) != 16 || prev[0] != 0xff {
		t.Fatalf("two secrets: %x %x %v", cur, prev, err)
	}
	if cur, prev, err := dnsserver.ReadCookieSecrets(write("one", "00112233445566778899aabbccddeeff\n")); err != nil || len(cur) != 16 || prev != nil {
		t.Fatalf("one secret: %x %x %v", cur, prev, err)
	}
	bad := write("bad", "00112233445566778899aabbccddeeff\nnot-hex\n")
	if _, _, err := dnsserver.ReadCookieSecrets(bad); err == nil || !strings.Contains(err.Error(), bad+": line 2 is not 32 hex digits") {
		t.Errorf("malformed: %v", err)
	}
	if _, _, err := dnsserver.ReadCookieSecrets(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v, want fs.ErrNotExist", err)
	}
}

// TestLoadCookieSecrets: the server rolls to the file's secrets; a bad
// file changes nothing.
func TestLoadCookieSecrets(t *testing.T) {
	const name = "web.shop.svc.cairn.internal."
	f := start(t, shopServices(), cookies)
	client := []byte("cookie!!")
	ask := func(c []byte) []byte {
		t.Helper()
		return cookieOf(t, f.ask("udp", withCookie(query(name, dns.TypeA, true), c)))
	}
	next := bytes.Repeat([]byte{0x5a}, 16)
	fresh := append(bytes.Clone(client), f.serverCookie(next, client)...)
	p := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(p, []byte(strings.Repeat("5a", 16)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if prev, err := f.srv.LoadCookieSecrets(p); err != nil || prev {
		t.Fatalf("LoadCookieSecrets: previous %v, %v", prev, err)
	}
	if got := ask(fresh); !bytes.Equal(got, fresh) {
		t.Fatalf("a cookie of the file's secret: answered %x, want it echoed %x", got, fresh)
	}
	if err := os.WriteFile(p, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.LoadCookieSecrets(p); err == nil {
		t.Fatal("a malformed file was loaded")
	}
	if got := ask(fresh); !bytes.Equal(got, fresh) {
		t.Errorf("after a refused file: answered %x, want the secret kept", got)
	}
}
