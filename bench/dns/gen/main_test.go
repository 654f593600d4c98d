package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/wire"
	"github.com/miekg/dns"
)

// TestWriteIsConsistent checks that the three forms describe the same
// names: every registration's address is in the zone under its service and
// its instance, every positive query has an answer in the zone, and every
// NXDOMAIN query names nothing in it.
func TestWriteIsConsistent(t *testing.T) {
	cfg := Config{Services: 40, Endpoints: 8, Namespace: "bench", Domain: "cairn.internal.",
		Region: "bench", Zone: "bench-a", Port: 8080, TTL: 5, NXPercent: 5, Seed: 1, Churn: "today"}
	dir := t.TempDir()
	if err := write(cfg, dir); err != nil {
		t.Fatal(err)
	}

	// name -> type -> rdata
	zone := map[string]map[uint16][]string{}
	names := map[string]bool{} // every name, and every name between it and the apex
	f, err := os.Open(filepath.Join(dir, "cairn.internal.zone"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zp := dns.NewZoneParser(f, cfg.Domain, "cairn.internal.zone")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		h := rr.Header()
		if zone[h.Name] == nil {
			zone[h.Name] = map[uint16][]string{}
		}
		zone[h.Name][h.Rrtype] = append(zone[h.Name][h.Rrtype], strings.TrimPrefix(rr.String(), h.String()))
		for n := h.Name; dns.IsSubDomain(cfg.Domain, n); {
			names[n] = true
			i, end := dns.NextLabel(n, 0)
			if end {
				break
			}
			n = n[i:]
		}
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("zone file does not parse: %v", err)
	}
	if got := len(zone[cfg.Domain][dns.TypeSOA]); got != 1 {
		t.Errorf("apex has %d SOA records, want 1", got)
	}

	regs := readJSONLines[Registration](t, filepath.Join(dir, "registrations.jsonl"))
	if len(regs) != cfg.Services*cfg.Endpoints {
		t.Fatalf("%d registrations, want %d", len(regs), cfg.Services*cfg.Endpoints)
	}
	seen := map[string]bool{}
	for _, r := range regs {
		if seen[r.Address] {
			t.Errorf("address %s registered twice", r.Address)
		}
		seen[r.Address] = true
		svc := r.Service + "." + r.Namespace + ".svc." + cfg.Domain
		if !contains(zone[svc][dns.TypeA], r.Address) {
			t.Errorf("%s: %s missing from the zone's A RRset", svc, r.Address)
		}
		if !contains(zone[r.InstanceID+"."+svc][dns.TypeA], r.Address) {
			t.Errorf("%s.%s: A %s missing from the zone", r.InstanceID, svc, r.Address)
		}
		srv := "0 100 8080 " + r.InstanceID + "." + svc
		if !contains(zone["_http._tcp."+svc][dns.TypeSRV], srv) {
			t.Errorf("_http._tcp.%s: SRV %q missing", svc, srv)
		}
	}

	qf, err := os.Open(filepath.Join(dir, "queries.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer qf.Close()
	var pos, nx int
	sc := bufio.NewScanner(qf)
	for sc.Scan() {
		name, typ, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("query line %q: want NAME TYPE", sc.Text())
		}
		name = dns.Fqdn(name)
		if names[name] {
			pos++
			if len(zone[name][dns.StringToType[typ]]) == 0 {
				t.Errorf("query %s %s: no such records in the zone", name, typ)
			}
		} else {
			nx++
		}
	}
	if pos != 2*cfg.Services {
		t.Errorf("%d positive queries, want %d (A and SRV per service)", pos, 2*cfg.Services)
	}
	if want := 4; nx != want { // 80 * 5/95 = 4.2
		t.Errorf("%d NXDOMAIN queries, want %d", nx, want)
	}
}

// TestPoliciesAreValid applies the store's own defaults and validation
// to every policy, and checks that the steady one re-admits as quickly
// as the steady churn driver assumes (bench/dns/drive, flip_steady.go).
func TestPoliciesAreValid(t *testing.T) {
	for churn := range policies {
		t.Run(churn, func(t *testing.T) {
			cfg := Config{Services: 3, Endpoints: 8, Namespace: "bench", Domain: "cairn.internal.", Port: 8080, TTL: 5, Churn: churn}
			var b strings.Builder
			w := bufio.NewWriter(&b)
			cfg.servicesYAML(w)
			w.Flush()
			svcs, err := wire.ParseServices(strings.NewReader(b.String()))
			if err != nil {
				t.Fatal(err)
			}
			if len(svcs) != cfg.Services {
				t.Fatalf("%d services, want %d", len(svcs), cfg.Services)
			}
			for _, s := range svcs {
				s = s.WithDefaults()
				if err := s.Validate(); err != nil {
					t.Fatalf("%s: %v", s.Name, err)
				}
				p := s.Policy
				if churn == "rollout" {
					// A real rollout: slow start at its default.
					if p.SlowStart.D() != wire.DefaultSlowStart {
						t.Errorf("%s: slow_start %s, want the default %s", s.Name, p.SlowStart.D(), wire.DefaultSlowStart)
					}
					continue
				}
				if *p.FlapLimit != 0 || p.SlowStart.D() != 0 || *p.MinHealthyFraction != 0 || p.ShrinkCap != 1 {
					t.Errorf("%s: flap_limit %d, slow_start %s, min_healthy_fraction %g, shrink_cap %g: want 0, 0s, 0, 1",
						s.Name, *p.FlapLimit, p.SlowStart.D(), *p.MinHealthyFraction, p.ShrinkCap)
				}
				if churn == "steady" && (p.WithdrawAfter != 1 || p.AdmitAfter != 2 || p.AdmitMin.D() != 0) {
					t.Errorf("%s: withdraw_after %d, admit_after %d, admit_min %s: want 1, 2, 0s",
						s.Name, p.WithdrawAfter, p.AdmitAfter, p.AdmitMin.D())
				}
				if churn == "today" && (p.AdmitAfter != wire.DefaultAdmitAfter || p.AdmitMin.D() != wire.DefaultAdmitMin) {
					t.Errorf("%s: admit_after %d, admit_min %s: want the defaults", s.Name, p.AdmitAfter, p.AdmitMin.D())
				}
			}
		})
	}
}

func TestQueriesAreSeeded(t *testing.T) {
	cfg := Config{Services: 100, Endpoints: 8, Namespace: "bench", Domain: "cairn.internal.", NXPercent: 5, Seed: 7}
	a, b := cfg.queries(), cfg.queries()
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Error("the same seed gave two query orders")
	}
	cfg.Seed = 8
	if strings.Join(a, "\n") == strings.Join(cfg.queries(), "\n") {
		t.Error("two seeds gave the same query order")
	}
	if len(a) != 211 { // 200 + 11 (200 * 5/95 = 10.5, rounded)
		t.Errorf("%d queries, want 211", len(a))
	}
}

func TestAddressesAvoidNetworkAndBroadcast(t *testing.T) {
	for i := range 1 << 12 {
		for j := range 14 {
			a := address(i, j).As4()
			if a[0] != 10 || a[3] == 0 || a[3] == 255 {
				t.Fatalf("address(%d, %d) = %v", i, j, address(i, j))
			}
		}
	}
}

func readJSONLines[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	dec := json.NewDecoder(f)
	for dec.More() {
		var v T
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func contains(rdata []string, want string) bool {
	for _, r := range rdata {
		if strings.TrimSpace(r) == want || strings.TrimSuffix(strings.TrimSpace(r), ".") == strings.TrimSuffix(want, ".") {
			return true
		}
	}
	return false
}
