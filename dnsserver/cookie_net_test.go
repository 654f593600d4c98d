package dnsserver_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
)

var (
	testSecret     = []byte("cairn-test-key-1")
	testPrevSecret = []byte("cairn-test-key-0")
	clientCookie   = []byte{0x24, 0x64, 0xc4, 0xab, 0xcf, 0x10, 0xc9, 0x57}
	loopback       = netip.MustParseAddr("127.0.0.1")
)

// withCookie adds a COOKIE option of octets c to q (which has EDNS).
func withCookie(q *dns.Msg, c []byte) *dns.Msg {
	o := q.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: hex.EncodeToString(c)})
	return q
}

// cookieOf returns the COOKIE options' octets in r: nil for none.
func cookieOf(t *testing.T, r *dns.Msg) []byte {
	t.Helper()
	o := r.IsEdns0()
	if o == nil {
		return nil
	}
	var out []byte
	n := 0
	for _, op := range o.Option {
		if c, ok := op.(*dns.EDNS0_COOKIE); ok {
			b, err := hex.DecodeString(c.Cookie)
			if err != nil {
				t.Fatal(err)
			}
			out = b
			n++
		}
	}
	if n > 1 {
		t.Fatalf("%d COOKIE options in %v", n, r)
	}
	return out
}

// serverCookie is what the fixture's server, keyed with secret, makes for
// client at the fixture's clock from loopback.
func (f *fixture) serverCookie(secret, client []byte) []byte {
	return dnsserver.ServerCookie(secret, client, uint32(f.clock().Unix()), loopback)
}

func cookies(c *dnsserver.Config) {
	own(c)
	c.Cookies = dnsserver.CookieConfig{Mode: dnsserver.ModeOn, Secret: testSecret, PreviousSecret: testPrevSecret}
}

// TestCookies checks RFC 7873 and RFC 9018 on the wire, over UDP (the
// fast path, and miekg/dns's for a query it does not take) and TCP.
func TestCookies(t *testing.T) {
	const name = "web.shop.svc.cairn.internal."
	f := start(t, shopServices(), cookies)
	// slow makes q take the UDP loop's miekg/dns path: an option the fast
	// parser does not know.
	slow := func(q *dns.Msg) *dns.Msg {
		o := q.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1}})
		return q
	}
	for _, via := range []struct {
		name, net string
		shape     func(*dns.Msg) *dns.Msg
	}{
		{"udp", "udp", func(q *dns.Msg) *dns.Msg { return q }},
		{"udp, miekg/dns's parser", "udp", slow},
		{"tcp", "tcp", func(q *dns.Msg) *dns.Msg { return q }},
	} {
		ask := func(c []byte) *dns.Msg {
			t.Helper()
			q := via.shape(query(name, dns.TypeA, true))
			if c != nil {
				withCookie(q, c)
			}
			return f.ask(via.net, q)
		}
		answered := func(t *testing.T, r *dns.Msg) {
			t.Helper()
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || r.Truncated {
				t.Fatalf("not answered in full: %v", r)
			}
		}
		t.Run(via.name+": no cookie in, none out", func(t *testing.T) {
			r := ask(nil)
			answered(t, r)
			if c := cookieOf(t, r); c != nil {
				t.Errorf("COOKIE %x in the answer to a query without one", c)
			}
		})
		t.Run(via.name+": a client cookie gets a fresh server cookie", func(t *testing.T) {
			r := ask(clientCookie)
			answered(t, r)
			want := append(append([]byte(nil), clientCookie...), f.serverCookie(testSecret, clientCookie)...)
			if got := cookieOf(t, r); !bytes.Equal(got, want) {
				t.Fatalf("COOKIE %x, want %x", got, want)
			}
		})
		t.Run(via.name+": the server cookie sent back verifies and is echoed", func(t *testing.T) {
			full := cookieOf(t, ask(clientCookie))
			valid := counter(t, f, "cairn_dns_cookies_total", "valid")
			// Ten minutes on, a cookie made again would differ; the echo
			// is the one sent.
			f.advance(10 * time.Minute)
			r := ask(full)
			answered(t, r)
			if got := cookieOf(t, r); !bytes.Equal(got, full) {
				t.Errorf("COOKIE %x, want %x echoed", got, full)
			}
			if n := counter(t, f, "cairn_dns_cookies_total", "valid"); n != valid+1 {
				t.Errorf("valid cookies counted %v, want %v", n, valid+1)
			}
			// Past half an hour it is renewed.
			f.advance(25 * time.Minute)
			r = ask(full)
			want := append(append([]byte(nil), clientCookie...), f.serverCookie(testSecret, clientCookie)...)
			if got := cookieOf(t, r); !bytes.Equal(got, want) {
				t.Errorf("35 minutes on: COOKIE %x, want a renewed one, %x", got, want)
			}
		})
		t.Run(via.name+": the previous secret's cookie verifies and is renewed", func(t *testing.T) {
			old := append(append([]byte(nil), clientCookie...), f.serverCookie(testPrevSecret, clientCookie)...)
			valid := counter(t, f, "cairn_dns_cookies_total", "valid")
			r := ask(old)
			answered(t, r)
			want := append(append([]byte(nil), clientCookie...), f.serverCookie(testSecret, clientCookie)...)
			if got := cookieOf(t, r); !bytes.Equal(got, want) {
				t.Errorf("COOKIE %x, want one of the current secret, %x", got, want)
			}
			if n := counter(t, f, "cairn_dns_cookies_total", "valid"); n != valid+1 {
				t.Errorf("valid cookies counted %v, want %v", n, valid+1)
			}
		})
		t.Run(via.name+": a server cookie that does not verify gets a fresh one", func(t *testing.T) {
			at := func(d time.Duration, ip netip.Addr, secret []byte) []byte {
				c := dnsserver.ServerCookie(secret, clientCookie, uint32(f.clock().Add(d).Unix()), ip)
				return append(append([]byte(nil), clientCookie...), c...)
			}
			tampered := at(0, loopback, testSecret)
			tampered[20] ^= 0x40
			for _, c := range []struct {
				name   string
				cookie []byte
			}{
				{"expired", at(-61*time.Minute, loopback, testSecret)},
				{"from the future", at(6*time.Minute, loopback, testSecret)},
				{"made for another address", at(0, netip.MustParseAddr("127.0.0.9"), testSecret)},
				{"tampered with", tampered},
				{"of another secret", at(0, loopback, []byte("not-the-secret!!"))},
				{"of another server's kind", append(append([]byte(nil), clientCookie...), 9, 9, 9, 9, 9, 9, 9, 9)},
			} {
				invalid := counter(t, f, "cairn_dns_cookies_total", "invalid")
				r := ask(c.cookie)
				answered(t, r)
				want := append(append([]byte(nil), clientCookie...), f.serverCookie(testSecret, clientCookie)...)
				if got := cookieOf(t, r); !bytes.Equal(got, want) {
					t.Errorf("%s: COOKIE %x, want a fresh one, %x", c.name, got, want)
				}
				if n := counter(t, f, "cairn_dns_cookies_total", "invalid"); n != invalid+1 {
					t.Errorf("%s: invalid cookies counted %v, want %v", c.name, n, invalid+1)
				}
			}
		})
		t.Run(via.name+": a malformed cookie is FORMERR", func(t *testing.T) {
			for _, n := range []int{0, 1, 7, 9, 15, 41, 60} {
				q := via.shape(query(name, dns.TypeA, true))
				withCookie(q, bytes.Repeat([]byte{0xab}, n))
				r := f.ask(via.net, q)
				if r.Rcode != dns.RcodeFormatError || len(r.Question) != 1 || r.Question[0] != q.Question[0] || len(r.Answer) != 0 {
					t.Errorf("%d octets: %v; want FORMERR with the question", n, r)
				}
				if r.IsEdns0() == nil || cookieOf(t, r) != nil {
					t.Errorf("%d octets: OPT %v; want one without a cookie", n, r.IsEdns0())
				}
			}
		})
	}
	t.Run("only the first COOKIE option counts", func(t *testing.T) {
		q := withCookie(withCookie(query(name, dns.TypeA, true), clientCookie), []byte{1, 2, 3})
		r := f.ask("udp", q)
		want := append(append([]byte(nil), clientCookie...), f.serverCookie(testSecret, clientCookie)...)
		if got := cookieOf(t, r); r.Rcode != dns.RcodeSuccess || !bytes.Equal(got, want) {
			t.Errorf("%s, COOKIE %x; want NOERROR and %x", dns.RcodeToString[r.Rcode], got, want)
		}
	})
}

// With cookies off, the option is ignored: no cookie out, and a
// malformed one is no error (a server without cookies does not read it).
func TestCookiesOff(t *testing.T) {
	f := start(t, shopServices(), func(c *dnsserver.Config) {
		own(c)
		c.Cookies.Mode = dnsserver.ModeOff
	})
	for _, c := range [][]byte{clientCookie, {1, 2, 3}} {
		r := f.ask("udp", withCookie(query("web.shop.svc.cairn.internal.", dns.TypeA, true), c))
		if r.Rcode != dns.RcodeSuccess || cookieOf(t, r) != nil {
			t.Errorf("cookie %x: %s, COOKIE %x; want NOERROR without one", c, dns.RcodeToString[r.Rcode], cookieOf(t, r))
		}
	}
	if n := gauge(t, f, "cairn_dns_cookies_enabled"); n != 0 {
		t.Errorf("cairn_dns_cookies_enabled %v", n)
	}
}

// By default (ModeAuto) a server on loopback answers no cookie and limits
// nothing; one on another address does both (Mode.enabled has the
// table of addresses).
func TestProtectionDefaults(t *testing.T) {
	f := start(t, shopServices(), own)
	r := f.ask("udp", withCookie(query("web.shop.svc.cairn.internal.", dns.TypeA, true), clientCookie))
	if cookieOf(t, r) != nil {
		t.Errorf("a cookie from a loopback server by default: %v", r)
	}
	if gauge(t, f, "cairn_dns_rrl_enabled") != 0 || gauge(t, f, "cairn_dns_cookies_enabled") != 0 {
		t.Error("RRL or cookies enabled on loopback by default")
	}
	f = start(t, shopServices(), func(c *dnsserver.Config) {
		own(c)
		c.Addr = "0.0.0.0:0"
	})
	if gauge(t, f, "cairn_dns_rrl_enabled") != 1 || gauge(t, f, "cairn_dns_cookies_enabled") != 1 {
		t.Error("RRL or cookies not enabled on 0.0.0.0 by default")
	}
}

// counter is the value of the series of a counter family with one label.
func counter(t *testing.T, f *fixture, name, label string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s}", name, label)
	return 0
}

// gauge is the value of a gauge without labels.
func gauge(t *testing.T, f *fixture, name string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestCookiesDig asks with dig +cookie, a client that speaks cookies as
// resolvers do: the first answer carries a server cookie after dig's own
// client cookie, which dig calls good; sent back ten minutes later, it
// verifies (counted valid), is echoed, and dig calls it good again.
func TestCookiesDig(t *testing.T) {
	bin := needTool(t, "dig", "bind9-dnsutils")
	f := start(t, shopServices(), cookies)
	host, port, err := net.SplitHostPort(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	dig := func(cookie string) (hexCookie, verdict string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "+norec", "+time=2", "+tries=1", cookie,
			"-p", port, "@"+host, "web.shop.svc.cairn.internal.", "A").CombinedOutput()
		if err != nil {
			t.Fatalf("dig %s: %v\n%s", cookie, err, out)
		}
		m := regexp.MustCompile(`(?m)^; COOKIE: ([0-9a-f]+) \(([a-z]+)\)`).FindSubmatch(out)
		if m == nil || !bytes.Contains(out, []byte("status: NOERROR")) {
			t.Fatalf("dig %s: no COOKIE line, or not NOERROR:\n%s", cookie, out)
		}
		return string(m[1]), string(m[2])
	}
	first, verdict := dig("+cookie")
	if len(first) != 48 || verdict != "good" {
		t.Fatalf("dig +cookie: COOKIE %s (%s); want a client and a server cookie, 48 hex digits, good", first, verdict)
	}
	f.advance(10 * time.Minute)
	valid := counter(t, f, "cairn_dns_cookies_total", "valid")
	second, verdict := dig("+cookie=" + first)
	if second != first || verdict != "good" {
		t.Errorf("dig +cookie=%s: COOKIE %s (%s); want it echoed, good", first, second, verdict)
	}
	if n := counter(t, f, "cairn_dns_cookies_total", "valid"); n != valid+1 {
		t.Errorf("valid cookies counted %v, want %v", n, valid+1)
	}
}

// needTool returns the path of a tool the test needs. Without it the test
// skips, saying so, except under CI=true, where it fails: CI installs it.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (Debian package %s); under CI=true a missing tool fails the test", name, pkg)
	}
	t.Skipf("%s is not installed (Debian package %s): skipped; `apt-get install %s` to run it", name, pkg, pkg)
	return ""
}

// TestSetCookieSecrets: the secrets roll without a restart (RFC 9018 §5).
// Given the new secret with the old one as previous, a cookie of the old
// secret still verifies and is answered with a fresh one of the new; with
// the old one dropped, it no longer verifies. Bad secrets, or cookies
// off, are refused and change nothing.
func TestSetCookieSecrets(t *testing.T) {
	const name = "web.shop.svc.cairn.internal."
	f := start(t, shopServices(), cookies)
	client := []byte("cookie!!")
	ask := func(c []byte) []byte {
		t.Helper()
		return cookieOf(t, f.ask("udp", withCookie(query(name, dns.TypeA, true), c)))
	}
	old := append(slices.Clone(client), f.serverCookie(testSecret, client)...)
	if got := ask(old); !bytes.Equal(got, old) {
		t.Fatalf("a cookie of the current secret: answered %x, want it echoed %x", got, old)
	}
	next := bytes.Repeat([]byte{0x5a}, 16)
	fresh := append(slices.Clone(client), f.serverCookie(next, client)...)

	// Rolled with the old secret previous, the old cookie verifies (and
	// is renewed); with it dropped, it does not. Either way the answer
	// carries a fresh cookie of the new secret.
	for _, step := range []struct {
		what   string
		prev   []byte
		result string
	}{{"rolled, the old secret previous", testSecret, "valid"}, {"the old secret dropped", nil, "invalid"}} {
		if err := f.srv.SetCookieSecrets(next, step.prev); err != nil {
			t.Fatal(err)
		}
		before := counter(t, f, "cairn_dns_cookies_total", step.result)
		if got := ask(old); !bytes.Equal(got, fresh) {
			t.Errorf("%s: answered %x, want a fresh cookie of the new secret %x", step.what, got, fresh)
		}
		if n := counter(t, f, "cairn_dns_cookies_total", step.result); n != before+1 {
			t.Errorf("%s: the old secret's cookie counted %s %v times, want once", step.what, step.result, n-before)
		}
	}
	if got := ask(fresh); !bytes.Equal(got, fresh) {
		t.Errorf("a cookie of the new secret: answered %x, want it echoed", got)
	}

	for _, bad := range []struct{ cur, prev []byte }{{nil, nil}, {[]byte("short"), nil}, {next, []byte("short")}} {
		if err := f.srv.SetCookieSecrets(bad.cur, bad.prev); err == nil {
			t.Errorf("SetCookieSecrets(%x, %x) accepted", bad.cur, bad.prev)
		}
	}
	if got := ask(fresh); !bytes.Equal(got, fresh) {
		t.Errorf("after refused secrets: answered %x, want the new secret's cookie echoed", got)
	}

	off := start(t, shopServices(), own) // loopback: cookies off by default
	if err := off.srv.SetCookieSecrets(next, nil); err == nil || !strings.Contains(err.Error(), "cookies are off") {
		t.Errorf("cookies off: SetCookieSecrets: %v, want a refusal", err)
	}
}

func TestParseCookieSecrets(t *testing.T) {
	a, b := strings.Repeat("ab", 16), strings.Repeat("cd", 16)
	for _, tc := range []struct {
		in, err   string
		cur, prev string
	}{
		{in: a + "\n", cur: a},
		{in: a + "\n" + b + "\n", cur: a, prev: b},
		{in: "", err: "want one secret"},
		{in: a + "\n" + b + "\n" + a, err: "want one secret"},
		{in: a[:30], err: "line 1 is not 32 hex digits"},
		{in: a + "\nzz" + b[2:], err: "line 2 is not 32 hex digits"},
	} {
		cur, prev, err := dnsserver.ParseCookieSecrets([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || hex.EncodeToString(cur) != tc.cur || hex.EncodeToString(prev) != tc.prev {
			t.Errorf("%q: %x, %x, %v; want %s, %s", tc.in, cur, prev, err, tc.cur, tc.prev)
		}
	}
}
