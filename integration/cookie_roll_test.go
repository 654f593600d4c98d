package integration

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestDNSCookieSecretRoll: a real server rolls its DNS cookie secret on
// SIGHUP, without a restart (RFC 9018 §5). With the new secret and the
// old one as previous, a cookie of the old secret still verifies and is
// answered with a fresh one; with the old one dropped it no longer
// verifies; a broken file is refused, logged, and changes nothing.
func TestDNSCookieSecretRoll(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	a, b := strings.Repeat("a1", 16), strings.Repeat("b2", 16)
	secrets := filepath.Join(t.TempDir(), "cookie-secret")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(secrets, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(a + "\n")
	c := StartCluster(t, 1, "--dns-cookies", "on", "--dns-cookie-secret-file", secrets)
	n := c.Nodes[0]
	ctx := ctxT(t, time.Minute)
	client := []byte("roll-it!")
	ask := func(cookie []byte) []byte {
		t.Helper()
		q := new(dns.Msg)
		q.SetQuestion("cairn.internal.", dns.TypeSOA)
		q.SetEdns0(1232, false)
		o := q.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: hex.EncodeToString(cookie)})
		r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, n.DNSAddr)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range r.IsEdns0().Option {
			if ck, ok := op.(*dns.EDNS0_COOKIE); ok {
				got, err := hex.DecodeString(ck.Cookie)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
		}
		t.Fatalf("no COOKIE in the answer %v", r)
		return nil
	}
	metric := func(result string) float64 {
		t.Helper()
		v, err := n.Metric(ctx, fmt.Sprintf(`cairn_dns_cookies_total{result=%q}`, result))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	hup := func() {
		t.Helper()
		if err := n.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	old := ask(client)
	if len(old) != 24 {
		t.Fatalf("a client cookie alone: answered %x, want a client and a server cookie", old)
	}
	if got := ask(old); !bytes.Equal(got, old) {
		t.Fatalf("the server's own cookie: answered %x, want it echoed", got)
	}

	// The new secret, the old one previous: the old cookie verifies and
	// is renewed.
	write(b + "\n" + a + "\n")
	hup()
	var fresh []byte
	Eventually(t, 10*time.Second, func() error {
		valid := metric("valid")
		if fresh = ask(old); bytes.Equal(fresh, old) {
			return fmt.Errorf("the old secret's cookie is still echoed: not reloaded yet")
		}
		if v := metric("valid"); v != valid+1 {
			return fmt.Errorf("the old secret's cookie, with it previous, counted valid %v times; want once", v-valid)
		}
		return nil
	})
	if got := ask(fresh); !bytes.Equal(got, fresh) {
		t.Errorf("the new secret's cookie: answered %x, want it echoed", got)
	}

	// The old secret dropped: its cookie no longer verifies.
	write(b + "\n")
	hup()
	Eventually(t, 10*time.Second, func() error {
		invalid := metric("invalid")
		ask(old)
		if v := metric("invalid"); v != invalid+1 {
			return fmt.Errorf("the dropped secret's cookie is not counted invalid yet")
		}
		return nil
	})

	// A broken file: refused, logged, nothing changes.
	write("not a secret\n")
	hup()
	Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(n.Tail(20), "reloading the DNS cookie secrets: still using the previous ones") {
			return fmt.Errorf("no refusal in the log yet")
		}
		return nil
	})
	if got := ask(fresh); !bytes.Equal(got, fresh) {
		t.Errorf("after a broken file: the new secret's cookie answered %x, want it echoed", got)
	}
}
