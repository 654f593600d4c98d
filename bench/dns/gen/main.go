// Command gen writes the DNS benchmark's data set in the three forms the
// harness (bench/dns/run.sh) needs, all describing the same names:
//
//   - services.yaml and registrations.jsonl: what cairn is loaded with, over
//     its API (cairn apply -f, then POST /v1/services/{ns}/{svc}/instances
//     per line, which bench/dns/drive does);
//   - cairn.internal.zone: an RFC 1035 zone file with the records cairn
//     serves for that data (SPEC §3), for CoreDNS's file plugin and Knot;
//   - queries.txt: the dnsperf query mix, A and SRV queries for every
//     service plus 5% names that do not exist, shuffled.
//
// For N services (-n, default 1000) in namespace bench, service svc<i> has
// instances ep1..ep8, each with one IPv4 address in 10.0.0.0/8 and port http
// 8080, all in the same region and zone (the one cairn runs in, so every
// endpoint is tier 0 and SRV priority 0). The output depends only on the
// flags: the query order comes from -seed.
//
// The service definitions have no health check, so cairn never probes the
// 10.x addresses: no benchmark traffic leaves the machine. Readiness is
// `self`, so MODE=flip can flip health with self-reports. -churn picks the
// policy for the churn driver's style (bench/dns/drive): today (the
// default, as the first churn runs had it) or steady (re-admission as
// quick as the store allows).
//
//	go run ./bench/dns/gen -n 1000 -out /tmp/dnsdata [-churn today|steady|rollout]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
)

// Config is the data set's shape. The zero value is not useful; main fills
// it from flags.
type Config struct {
	Services  int    // number of services, svc0..svc<N-1>
	Endpoints int    // instances per service, ep1..ep<E>
	Namespace string // cairn namespace
	Domain    string // zone apex, fully qualified
	Region    string // every instance's region (cairn runs with --region this)
	Zone      string // every instance's zone (cairn runs with --zone this)
	Port      int    // the http port's number
	TTL       int    // answer TTL and SOA minimum (negative TTL), seconds
	NXPercent int    // share of queries for names that do not exist, percent
	Seed      uint64 // shuffles the query file
	Churn     string // the services' policy: "today" or "steady" (servicesYAML)
}

func main() {
	cfg := Config{Endpoints: 8, Region: "bench", Zone: "bench-a", Port: 8080, TTL: 5}
	out := flag.String("out", "", "output directory (created)")
	flag.IntVar(&cfg.Services, "n", 1000, "number of services")
	flag.StringVar(&cfg.Namespace, "namespace", "bench", "cairn namespace")
	flag.StringVar(&cfg.Domain, "domain", "cairn.internal.", "zone apex")
	flag.IntVar(&cfg.NXPercent, "nx", 5, "percent of queries for names that do not exist")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the query shuffle")
	flag.StringVar(&cfg.Churn, "churn", "today", "the services' policy: today or steady (the churn driver's style) or rollout (the defaults, slow start on)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gen: -out is required")
		os.Exit(2)
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(2)
	}
	if err := write(cfg, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func (c Config) validate() error {
	switch {
	case c.Services < 1 || c.Services > 1<<20:
		return fmt.Errorf("-n %d: want 1 to %d services", c.Services, 1<<20)
	case c.Endpoints < 1 || c.Endpoints > 14:
		return fmt.Errorf("%d endpoints per service: want 1 to 14", c.Endpoints)
	case c.NXPercent < 0 || c.NXPercent > 50:
		return fmt.Errorf("-nx %d: want 0 to 50", c.NXPercent)
	case len(c.Domain) == 0 || c.Domain[len(c.Domain)-1] != '.':
		return fmt.Errorf("-domain %q: want a fully qualified name (trailing dot)", c.Domain)
	case policies[c.Churn] == "":
		return fmt.Errorf("-churn %q: want today, steady or rollout", c.Churn)
	}
	return nil
}

// Registration is one line of registrations.jsonl: one instance, as the
// harness registers it.
type Registration struct {
	Namespace  string `json:"namespace"`
	Service    string `json:"service"`
	InstanceID string `json:"instance_id"`
	Address    string `json:"address"`
	Port       int    `json:"port"`
	Region     string `json:"region"`
	Zone       string `json:"zone"`
}

func service(i int) string { return fmt.Sprintf("svc%d", i) }

func instance(j int) string { return fmt.Sprintf("ep%d", j+1) }

// address gives service i's endpoint j an address in 10.0.0.0/8: a block of
// 16 per service, hosts 1..14 of it, so no address ends in .0 or .255.
func address(i, j int) netip.Addr {
	n := uint32(i)*16 + uint32(j) + 1
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

// svcName is the fully qualified name of service i (SPEC §3).
func (c Config) svcName(i int) string {
	return fmt.Sprintf("%s.%s.svc.%s", service(i), c.Namespace, c.Domain)
}

func (c Config) registrations() []Registration {
	regs := make([]Registration, 0, c.Services*c.Endpoints)
	for i := range c.Services {
		for j := range c.Endpoints {
			regs = append(regs, Registration{
				Namespace: c.Namespace, Service: service(i), InstanceID: instance(j),
				Address: address(i, j).String(), Port: c.Port, Region: c.Region, Zone: c.Zone,
			})
		}
	}
	return regs
}

// queries returns the dnsperf query lines: one A and one SRV query per
// service and NXPercent of the total for names that do not exist, shuffled.
func (c Config) queries() []string {
	pos := 2 * c.Services
	// nx / (pos + nx) = NXPercent / 100, rounded: 105 for 1000 services.
	nx := (pos*c.NXPercent + (100-c.NXPercent)/2) / (100 - c.NXPercent)
	lines := make([]string, 0, pos+nx)
	for i := range c.Services {
		lines = append(lines, c.svcName(i)+" A", "_http._tcp."+c.svcName(i)+" SRV")
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x6361_6972_6e)) // "cairn"
	for k := range nx {
		// Half under an existing service (a missing instance), half a
		// missing service: both are NXDOMAIN.
		if k%2 == 0 {
			lines = append(lines, fmt.Sprintf("nx%d.%s A", k, c.svcName(r.IntN(c.Services))))
		} else {
			lines = append(lines, fmt.Sprintf("nx%d.%s.svc.%s A", k, c.Namespace, c.Domain))
		}
	}
	r.Shuffle(len(lines), func(a, b int) { lines[a], lines[b] = lines[b], lines[a] })
	return lines
}

const servicesHeader = `# DNS benchmark services (bench/dns/gen): no check, so nothing is probed;
# readiness self, so MODE=flip can flip health with self-reports.
`

// policies are the services' policies by churn style, less dns_ttl and
// a_record_limit. Both turn off the bounds that would hold health flips
// back in MODE=flip as far as the store allows: the healthy fraction
// guard, flap quarantine, and the shrink cap as far as it goes (1, its
// most, still withdraws at most the published count per 10 s window),
// and slow start, so that SRV weights are the zone file's 100 at once.
// With every instance ready (MODE=main) they change nothing else.
//
// steady adds the quickest re-admission the store accepts, for the
// steady churn driver: admit_after must exceed withdraw_after, which is
// at least 1, so a report of ready=true re-admits on the second round
// that reads it, with no minimum time. today keeps the defaults the
// first churn runs had (withdraw_after 3, which reports do not use;
// admit_after 5 over admit_min 10s), so that the run as it was can be
// repeated.
var policies = map[string]string{
	"today":  "min_healthy_fraction: 0, shrink_cap: 1, flap_limit: 0, slow_start: 0s, lease_ttl: 24h",
	"steady": "min_healthy_fraction: 0, withdraw_after: 1, admit_after: 2, admit_min: 0s, shrink_cap: 1, flap_limit: 0, slow_start: 0s, lease_ttl: 24h",
	// rollout (MODE=rollout) keeps every default, slow start (30 s)
	// included, as a deploy tool's services would have them; only the
	// lease is long, so that no instance withdraws for want of reports.
	"rollout": "lease_ttl: 24h",
}

// servicesYAML is the definitions for cairn apply, with the policy of
// c.Churn.
func (c Config) servicesYAML(w *bufio.Writer) {
	w.WriteString(servicesHeader)
	for i := range c.Services {
		if i > 0 {
			w.WriteString("---\n")
		}
		fmt.Fprintf(w, "namespace: %s\nname: %s\n", c.Namespace, service(i))
		fmt.Fprintf(w, "ports: [{name: http, number: %d, protocol: tcp}]\n", c.Port)
		w.WriteString("capability: {readiness: self}\n")
		fmt.Fprintf(w, "policy: {dns_ttl: %ds, a_record_limit: %d, %s}\n", c.TTL, c.Endpoints, policies[c.Churn])
	}
}

// zoneFile writes the records cairn serves for the data set: apex SOA and
// NS (with the name server's address), per service the A RRset of its
// endpoints and the SRV RRset of port http, and each instance's A record.
func (c Config) zoneFile(w *bufio.Writer) {
	fmt.Fprintf(w, "; DNS benchmark zone (bench/dns/gen): %d services x %d endpoints, the names cairn serves (SPEC §3)\n",
		c.Services, c.Endpoints)
	fmt.Fprintf(w, "$ORIGIN %s\n$TTL %d\n", c.Domain, c.TTL)
	// The apex as cairn serves it: SOA and NS ns.<domain>, its address as glue.
	fmt.Fprintf(w, "@ IN SOA ns.%s hostmaster.%s 1 3600 600 86400 %d\n", c.Domain, c.Domain, c.TTL)
	fmt.Fprintf(w, "@ 3600 IN NS ns.%s\n", c.Domain)
	fmt.Fprintf(w, "ns 3600 IN A 127.0.0.1\n")
	for i := range c.Services {
		name := c.svcName(i)
		for j := range c.Endpoints {
			fmt.Fprintf(w, "%s IN A %s\n", name, address(i, j))
		}
		for j := range c.Endpoints {
			// priority 0 (tier 0: same zone), weight 100 (the default base
			// weight, slow start off), port, target.
			fmt.Fprintf(w, "_http._tcp.%s IN SRV 0 100 %d %s.%s\n", name, c.Port, instance(j), name)
		}
		for j := range c.Endpoints {
			fmt.Fprintf(w, "%s.%s IN A %s\n", instance(j), name, address(i, j))
		}
	}
}

func write(c Config, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %q: %w", dir, err)
	}
	files := []struct {
		name string
		fill func(*bufio.Writer) error
	}{
		{"services.yaml", func(w *bufio.Writer) error { c.servicesYAML(w); return nil }},
		{"registrations.jsonl", func(w *bufio.Writer) error {
			enc := json.NewEncoder(w)
			for _, r := range c.registrations() {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		}},
		{"cairn.internal.zone", func(w *bufio.Writer) error { c.zoneFile(w); return nil }},
		{"queries.txt", func(w *bufio.Writer) error {
			for _, q := range c.queries() {
				w.WriteString(q)
				w.WriteByte('\n')
			}
			return nil
		}},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		fh, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("creating %q: %w", path, err)
		}
		w := bufio.NewWriter(fh)
		err = f.fill(w)
		err = errors.Join(err, w.Flush(), fh.Close())
		if err != nil {
			return fmt.Errorf("writing %q: %w", path, err)
		}
	}
	return nil
}
