package dnsserver

import (
	"encoding/hex"
	"net/netip"
	"testing"
	"time"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cookieRequest is a request from ip carrying the COOKIE option c (hex).
func cookieRequest(t *testing.T, ip, c string) *request {
	t.Helper()
	req := &request{hasOPT: true, hasCookie: true, remote: netip.MustParseAddr(ip)}
	b := mustHex(t, c)
	req.cookieLen = len(b)
	copy(req.cookie[:], b)
	return req
}

// answered is the COOKIE option the answer to req carries, in hex ("" for
// none).
func answered(k *cookieKeys, req *request) string {
	var o opt
	k.cookieOpt(req, &o)
	if !o.hasCookie {
		return ""
	}
	return hex.EncodeToString(o.cookie[:])
}

// The examples of RFC 9018 Appendix A, both ways: the cookies a server
// makes, byte for byte, and its verdict on the cookies clients send back
// (the reserved octets as received, the previous secret after a roll).
func TestCookieRFC9018Examples(t *testing.T) {
	const (
		secret1 = "e5e973e5a6b2a43f48e7dc849e37bfcf"
		oldKey  = "dd3bdf9344b678b185a6f5cb60fca715"
		newKey  = "445536bcd2513298075a5d379663c962"
	)
	for _, c := range []struct {
		name         string
		secret, prev string
		ip, query    string
		now          int64
		verdict      cookieVerdict
		reply        string
	}{
		{"A.1: learning a new server cookie", secret1, "", "198.51.100.100",
			"2464c4abcf10c957", 1559731985, cookieClientOnly,
			"2464c4abcf10c957010000005cf79f111f8130c3eee29480"},
		{"A.2: 40 minutes later, the cookie verifies and is renewed", secret1, "", "198.51.100.100",
			"2464c4abcf10c957010000005cf79f111f8130c3eee29480", 1559734385, cookieRenew,
			"2464c4abcf10c957010000005cf7a871d4a564a1442aca77"},
		{"A.2: 10 minutes later, echoed", secret1, "", "198.51.100.100",
			"2464c4abcf10c957010000005cf79f111f8130c3eee29480", 1559731985 + 600, cookieValid,
			"2464c4abcf10c957010000005cf79f111f8130c3eee29480"},
		{"A.3: the reserved octets as sent are hashed", secret1, "", "203.0.113.203",
			"fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5", 1559727985 + 60, cookieValid,
			"fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5"},
		{"A.3: 1h52m later it has expired; a fresh one", secret1, "", "203.0.113.203",
			"fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5", 1559734700, cookieInvalid,
			"fc93fc62807ddb86010000005cf7a9acf73a7810aca2381e"},
		{"A.4: IPv6, made with the previous secret: accepted, renewed with the new one", newKey, oldKey,
			"2001:db8:220:1:59de:d0f4:8769:82b8",
			"22681ab97d52c298010000005cf7c57926556bd0934c72f8", 1559741961, cookieRenew,
			"22681ab97d52c298010000005cf7c609a6bb79d16625507a"},
		{"A.4: without the previous secret it does not verify", newKey, "",
			"2001:db8:220:1:59de:d0f4:8769:82b8",
			"22681ab97d52c298010000005cf7c57926556bd0934c72f8", 1559741961, cookieInvalid,
			"22681ab97d52c298010000005cf7c609a6bb79d16625507a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := CookieConfig{Secret: mustHex(t, c.secret)}
			if c.prev != "" {
				cfg.PreviousSecret = mustHex(t, c.prev)
			}
			k := newCookieKeys(cfg)
			req := cookieRequest(t, c.ip, c.query)
			k.check(req, time.Unix(c.now, 0))
			if req.cookieVerdict != c.verdict {
				t.Errorf("verdict %d, want %d", req.cookieVerdict, c.verdict)
			}
			if got := answered(k, req); got != c.reply {
				t.Errorf("answered %s\n            want %s", got, c.reply)
			}
		})
	}
}

// What makes a server cookie fail: every part of what it is made of, and
// its age (RFC 9018 §4.3: an hour back, five minutes ahead, in serial
// arithmetic across the 32-bit wrap).
func TestCookieVerdicts(t *testing.T) {
	k := newCookieKeys(CookieConfig{Secret: mustHex(t, "000102030405060708090a0b0c0d0e0f")})
	ip := netip.MustParseAddr("192.0.2.7")
	client := mustHex(t, "0123456789abcdef")
	made := func(ts uint32, ip netip.Addr) []byte {
		b := make([]byte, 24)
		copy(b, client)
		k.mint(b[8:], client, ts, ip)
		return b
	}
	check := func(c []byte, from netip.Addr, now uint32) cookieVerdict {
		req := &request{hasOPT: true, hasCookie: true, remote: from, cookieLen: len(c)}
		copy(req.cookie[:], c)
		k.check(req, time.Unix(int64(now), 0))
		return req.cookieVerdict
	}
	const t0 = 1_700_000_000
	flip := func(b []byte, i int) []byte { b = append([]byte(nil), b...); b[i] ^= 1; return b }
	for _, c := range []struct {
		name   string
		cookie []byte
		from   netip.Addr
		now    uint32
		want   cookieVerdict
	}{
		{"fresh", made(t0, ip), ip, t0, cookieValid},
		{"29 minutes old", made(t0, ip), ip, t0 + 29*60, cookieValid},
		{"31 minutes old: renewed", made(t0, ip), ip, t0 + 31*60, cookieRenew},
		{"an hour old, the last second", made(t0, ip), ip, t0 + 3600, cookieRenew},
		{"an hour and a second old", made(t0, ip), ip, t0 + 3601, cookieInvalid},
		{"five minutes ahead", made(t0+300, ip), ip, t0, cookieValid},
		{"five minutes and a second ahead", made(t0+301, ip), ip, t0, cookieInvalid},
		{"ten minutes old across the wrap", made(1<<32-300, ip), ip, 300, cookieValid},
		{"from another address", made(t0, ip), netip.MustParseAddr("192.0.2.8"), t0, cookieInvalid},
		{"the same address as IPv6", made(t0, ip), netip.AddrFrom16(ip.As16()), t0, cookieInvalid},
		{"another client cookie", flip(made(t0, ip), 0), ip, t0, cookieInvalid},
		{"another version", flip(made(t0, ip), 8), ip, t0, cookieInvalid},
		{"a reserved octet changed", flip(made(t0, ip), 9), ip, t0, cookieInvalid},
		{"a timestamp changed", flip(made(t0, ip), 15), ip, t0, cookieInvalid},
		{"the hash changed", flip(made(t0, ip), 23), ip, t0, cookieInvalid},
		{"another secret's", func() []byte {
			o := newCookieKeys(CookieConfig{Secret: mustHex(t, "ff0102030405060708090a0b0c0d0e0f")})
			b := append([]byte(nil), client...)
			b = append(b, make([]byte, 16)...)
			o.mint(b[8:], client, t0, ip)
			return b
		}(), ip, t0, cookieInvalid},
		{"client only", client, ip, t0, cookieClientOnly},
		{"another server's 8-octet cookie", make([]byte, 16), ip, t0, cookieInvalid},
		{"another server's 32-octet cookie", make([]byte, 40), ip, t0, cookieInvalid},
		{"empty", nil, ip, t0, cookieMalformed},
		{"7 octets", make([]byte, 7), ip, t0, cookieMalformed},
		{"9 octets", make([]byte, 9), ip, t0, cookieMalformed},
		{"15 octets", make([]byte, 15), ip, t0, cookieMalformed},
		{"41 octets", make([]byte, 41), ip, t0, cookieMalformed},
	} {
		if got := check(c.cookie, c.from, c.now); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
	// Checking, echoing and minting allocate nothing.
	req := &request{hasOPT: true, hasCookie: true, remote: ip, cookieLen: 24}
	copy(req.cookie[:], made(t0, ip))
	var o opt
	if n := testing.AllocsPerRun(100, func() {
		k.check(req, time.Unix(t0+2000, 0))
		k.cookieOpt(req, &o)
	}); n != 0 {
		t.Errorf("%v allocations per cookie", n)
	}
}

// A random secret is made when none is given, one per server.
func TestCookieRandomSecret(t *testing.T) {
	a, b := newCookieKeys(CookieConfig{}).set.Load(), newCookieKeys(CookieConfig{}).set.Load()
	if a.cur == b.cur || a.cur == (sipKey{}) || a.hasPrev {
		t.Fatalf("secrets %v and %v", a.cur, b.cur)
	}
}
