// Command xdsload is the xDS load generator of issue 11: it measures how
// fast a server in its own process propagates endpoint withdrawals and
// admissions to many delta xDS subscriptions, against SPEC §9.
//
// The target is `cairn server --dev` (-target cairn; built from the
// working tree unless -bin) or bench/cmd/xdspeer, go-control-plane's
// LinearCache behind its own delta server (-target linearcache; built
// unless -peer-bin), each started on free loopback ports with its data
// in a temporary folder. On cairn, xdsload applies -services services
// (namespace bench, named svc-<i>, one port "grpc"; no health check, no
// slow start, no flap limit, so that what is measured is propagation)
// and registers -endpoints instances of each through the HTTP API
// (10.<i/256>.<i%256>.<e+1>); the peer starts with the same layout.
//
// It opens -streams delta ADS streams over -conns HTTP/2 connections
// (xdsserver/xdstest), each subscribing to the assignments of -watch
// services chosen at random with a fixed seed, and waits until every
// stream has its first answer. It then makes changes at -rate a minute
// for -duration through the target's HTTP API, from -workers concurrent
// callers: a withdrawal takes a random endpoint in rotation out (cairn:
// deregister, or drain with -withdraw drain; both are published on
// commit), an admission puts back the endpoint out the longest
// (cairn: a new registration, on a new port; published on the next
// table build). Withdrawals come first until -out endpoints are out,
// then the two alternate, so the count in rotation stays steady. Each
// admission uses a port of its own, so that a subscriber can tell which
// admission it sees.
//
// A change is delivered to a subscriber watching its service when the
// subscriber first receives an assignment that reflects it (the
// withdrawn endpoint absent or not HEALTHY/UNKNOWN, the admitted one in
// rotation on its new port), decoded once per (name, version) for all
// streams by xdstest.Decoder. It is timed from the API call's return
// (the commit) to the subscriber's Recv returning it (client-side
// receipt, measured in this process), and from the call's start: a
// client making the change sees the second, and the first leaves out
// the reply's own delay (and counts a delivery seen before the reply as
// 0). The generator's own wait for a CPU during the changes is
// reported beside them (lag.go). A change a later change of the same endpoint overtook
// before the subscriber saw it is shed for that subscriber. Per kind it
// reports delivery p50/p99/max, the time until 99% of a change's
// subscribers had it (median and max over changes), what was shed and
// what never arrived, and how many changes reached 99% of their
// subscribers within 5 s (SPEC §4); the server's CPU (/proc/PID/stat) and the
// generator's (getrusage) during the changes; the server's RSS
// (/proc/PID/status VmRSS) before the streams, once all are admitted and
// after the changes, and so KiB per subscription.
//
// With -envoys N (cairn only), N real Envoy processes run beside the
// simulated subscribers (integration.Envoy: the shipped bootstrap, delta
// ADS, one worker thread), each subscribed to every cluster (wildcard
// CDS), so to every service. A withdrawal is delivered to an Envoy when
// its admin (/config_dump's endpoints, filtered to the services with a
// withdrawal it does not show yet) shows the host gone or not healthy:
// asked at once when a withdrawal commits, then every -envoy-poll while
// one is pending, so a time is late by at most that and the round trip,
// both reported. It reports withdrawal to Envoy p50/p99/max beside the
// simulated subscribers' from the same run, each Envoy's RSS once it
// holds the layout and after the changes, the Envoys' CPU during the
// changes, and a check of the endpoints out at the end in Envoy 0's
// /clusters (drain: DRAINING; deregister: gone).
//
// With -hostile N (issue 28; hostile.go), N more streams that mean
// harm are opened and subscribed before the honest ones, and held open
// through the changes: each declares a made-up locality of its own and
// subscribes to -hostile-real real names and -hostile-names junk ones,
// -hostile-batch a request, acknowledging nothing; refused by the
// server, it reconnects with backoff and sits at the names last
// accepted. The report adds what they held and every refusal by gRPC
// code and message; the server's RSS once they have subscribed, from
// which the honest streams' memory is then counted. Hostile connections
// come from -hostile-src (127.0.0.2), honest ones from -honest-srcs
// addresses 127.0.1.1 on, so that a cap per peer address tells them
// apart. -compare FILE… reads runs without and with hostile streams and
// prints the medians and the ratio of honest withdrawal p99 (SPEC §9:
// hostile subscribers move it by ≤ 10%).
//
// With -evacuate-at D (cairn only; evacuate.go), the instances are
// spread over -zones zones of region eu (endpoint e in zone eu-1 and
// the letter e mod -zones), and D into the changes xdsload evacuates
// -evacuate-zone (POST /v1/evacuations, forced: under churn a service
// may lack the capacity outside the zone), and with -undo-at undoes
// it. Every subscriber is in zone eu-1a. A subscriber sees the shift
// in a service's assignment when the zone's endpoints sit at its last
// priority, flagged cairn.evacuated (the undo: no longer flagged). The
// report adds how long the shift took to reach 99% of the subscribers
// (each in every service it watches that had endpoints in the zone at
// the commit and kept one until the shift came), and the withdrawals
// committed while it travelled, from
// the evacuation's call to the last subscriber's view, beside those
// committed outside: SPEC §4, a withdrawal is never delayed behind an
// admission or weight change.
//
// Modes set the SPEC's loads: -mode steady (400 services, each
// subscriber watching 10, 600 changes a minute) and -mode burst (40
// services, watching 10, 40,000 changes a minute); flags given
// explicitly override them. It prints one Markdown row and one JSON
// line. Every wait has a deadline and the whole run -timeout; the
// target is stopped and its folder removed at the end.
//
//	go run ./bench/cmd/xdsload -target cairn -mode steady -streams 2000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cairn-sd/cairn/integration"
)

type options struct {
	target, mode, withdraw                              string
	streams, conns, services, endpoints, watch, workers int
	out                                                 int
	rate                                                float64 // changes a minute
	duration, admitTimeout, linger, timeout             time.Duration
	bin, peerBin, perf, envoyBin                        string
	envoys, envoyWatch                                  int
	envoyPoll                                           time.Duration
	seed                                                uint64
	keep                                                bool
	compare                                             bool
	// The hostile streams (hostile.go) and where the streams come from.
	hostile, hostileNames, hostileReal, hostileBatch int
	hostileSotw, hostileConns, honestSrcs            int
	hostileSrc                                       string
	hostileSettle                                    time.Duration
	// The evacuation in the middle of the changes (evacuate.go).
	zones              int
	evacZone           string
	evacuateAt, undoAt time.Duration
}

func main() {
	var o options
	o.flags(flag.CommandLine)
	flag.Parse()
	if o.compare {
		if err := compare(os.Stdout, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "xdsload:", err)
			os.Exit(1)
		}
		return
	}
	if err := o.applyMode(); err != nil {
		fmt.Fprintln(os.Stderr, "xdsload:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	r, err := run(ctx, o)
	if r != nil {
		r.print()
	}
	cancel()
	stop()
	integration.RemoveBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdsload:", err)
		os.Exit(1)
	}
}

// flags defines the command's flags on fs, into o.
func (o *options) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.target, "target", "cairn", "cairn or linearcache (bench/cmd/xdspeer)")
	fs.StringVar(&o.mode, "mode", "steady", "steady (400 services, 600 changes a minute) or burst (40 services, 40,000 a minute)")
	fs.StringVar(&o.withdraw, "withdraw", "deregister", "how cairn withdraws an endpoint: deregister or drain")
	fs.IntVar(&o.streams, "streams", 2000, "delta subscriptions")
	fs.IntVar(&o.conns, "conns", 0, "HTTP/2 connections the streams share (default: streams/100, 20 to 600)")
	fs.IntVar(&o.services, "services", 0, "services (default: the mode's)")
	fs.IntVar(&o.endpoints, "endpoints", 8, "endpoints per service")
	fs.IntVar(&o.watch, "watch", 10, "services each subscriber watches")
	fs.Float64Var(&o.rate, "rate", 0, "changes a minute (default: the mode's)")
	fs.DurationVar(&o.duration, "duration", 0, "time the changes are made for (default: steady 60s, burst 30s)")
	fs.IntVar(&o.workers, "workers", 0, "concurrent API callers making the changes (default: steady 4, burst 128)")
	fs.IntVar(&o.out, "out", 0, "endpoints out of rotation (or being taken out) before withdrawals and admissions alternate (default: 2 × -workers, so that the callers always have an endpoint to change, and at most half the endpoints)")
	fs.DurationVar(&o.admitTimeout, "admit-timeout", 5*time.Minute, "most time for every stream to get its first answer")
	fs.DurationVar(&o.linger, "linger", 40*time.Second, "most time to wait for the last deliveries after the last change")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "upper bound on the whole run")
	fs.StringVar(&o.bin, "bin", "", "cairn binary (default: build one from the working tree)")
	fs.StringVar(&o.peerBin, "peer-bin", "", "xdspeer binary (default: build one from the working tree)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the subscriptions and the changes")
	fs.StringVar(&o.perf, "perf", "", "record the server's CPU profile with `perf record -g` during the changes into this file (perf report -i FILE)")
	fs.IntVar(&o.envoys, "envoys", 0, "real Envoy processes (the shipped bootstrap, delta ADS) subscribed to the server beside the simulated subscribers, each to every cluster; -target cairn only")
	fs.IntVar(&o.envoyWatch, "envoy-watch", 0, "time withdrawals on the first this many Envoys only (default: all); the others run and are measured for RSS and CPU, and their admin is not polled")
	fs.StringVar(&o.envoyBin, "envoy-bin", "", "Envoy binary (default: integration.EnvoyBinary: $CAIRN_ENVOY, then what make envoy installs, then PATH)")
	fs.DurationVar(&o.envoyPoll, "envoy-poll", 5*time.Millisecond, "how often each Envoy's admin is asked again about the services it has yet to show a withdrawal of (it is asked at once when one commits)")
	fs.BoolVar(&o.keep, "keep", false, "keep the target's folder (data dir and log; printed on stderr)")
	fs.IntVar(&o.hostile, "hostile", 0, "hostile streams beside the honest ones: each declares a made-up locality of its own and subscribes to -hostile-real real and -hostile-names junk names, and holds on; opened and subscribed before the honest streams")
	fs.IntVar(&o.hostileNames, "hostile-names", 10000, "junk names (names of nothing) each hostile stream subscribes to")
	fs.IntVar(&o.hostileReal, "hostile-real", 10, "real assignment names each hostile stream also subscribes to (first)")
	fs.IntVar(&o.hostileBatch, "hostile-batch", 1000, "names per subscription request of a hostile stream")
	fs.IntVar(&o.hostileSotw, "hostile-sotw", 0, "how many of the hostile streams speak state of the world (the rest delta)")
	fs.IntVar(&o.hostileConns, "hostile-conns", 0, "HTTP/2 connections the hostile streams share (default: hostile/100, at least 1)")
	fs.StringVar(&o.hostileSrc, "hostile-src", "127.0.0.2", "source address of the hostile connections (empty: any)")
	fs.DurationVar(&o.hostileSettle, "hostile-settle", 3*time.Minute, "most time for the hostile streams to reach their names (or a cap) before the honest streams open; the run goes on after it in any case")
	fs.IntVar(&o.honestSrcs, "honest-srcs", -1, "source addresses the honest connections are spread over, 127.0.1.1 on (0: any; default: enough for at most 500 streams each, at least 8), so that the server's cap on streams per peer address (--xds-max-streams-per-address, 1,000) does not refuse them")
	fs.IntVar(&o.zones, "zones", 0, "zones of region eu the endpoints are spread over, eu-1a on (default: 3 with -evacuate-at, else none)")
	fs.DurationVar(&o.evacuateAt, "evacuate-at", 0, "evacuate -evacuate-zone this long into the changes (cairn only; 0: no evacuation)")
	fs.StringVar(&o.evacZone, "evacuate-zone", "eu-1a", "the zone -evacuate-at evacuates (the subscribers' own)")
	fs.DurationVar(&o.undoAt, "undo-at", 0, "undo the evacuation this long into the changes (0: never)")
	fs.BoolVar(&o.compare, "compare", false, "compare the runs in the files named as arguments (xdsload's output): without hostile streams and with, medians and the ratio; no run")
}

// applyMode fills what the flags left to the mode, and checks the rest.
func (o *options) applyMode() error {
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	switch o.mode {
	case "steady":
		set(&o.services, 400)
		set(&o.workers, 4)
		if o.rate == 0 {
			o.rate = 600
		}
		if o.duration == 0 {
			o.duration = time.Minute
		}
	case "burst":
		set(&o.services, 40)
		set(&o.workers, 128)
		if o.rate == 0 {
			o.rate = 40_000
		}
		if o.duration == 0 {
			o.duration = 30 * time.Second
		}
	default:
		return fmt.Errorf("-mode %q: want steady or burst", o.mode)
	}
	set(&o.conns, min(max(o.streams/100, 20), 600))
	set(&o.hostileConns, max(o.hostile/100, 1))
	if o.honestSrcs == -1 {
		// Connections are spread over the addresses round robin: one
		// more address than streams/500 keeps each under 1,000 however
		// the connections fall.
		o.honestSrcs = min(max(8, o.streams/500+1), o.conns)
	}
	set(&o.envoyWatch, o.envoys)
	set(&o.out, max(1, min(2*o.workers, o.services*o.endpoints/2)))
	switch {
	case o.target != "cairn" && o.target != "linearcache":
		return fmt.Errorf("-target %q: want cairn or linearcache", o.target)
	case o.withdraw != "deregister" && o.withdraw != "drain":
		return fmt.Errorf("-withdraw %q: want deregister or drain", o.withdraw)
	case o.streams < 1 || o.conns < 1 || o.workers < 1 || o.out < 1:
		return fmt.Errorf("-streams, -conns, -workers and -out must be positive")
	case o.services < 1 || o.services > 65536 || o.endpoints < 1 || o.endpoints > 254:
		return fmt.Errorf("-services must be 1–65536 and -endpoints 1–254")
	case o.watch < 1 || o.watch > o.services:
		return fmt.Errorf("-watch must be 1–%d (the services)", o.services)
	case o.out >= o.services*o.endpoints:
		return fmt.Errorf("-out must be below the endpoints (%d)", o.services*o.endpoints)
	case o.envoys < 0 || o.envoys > 200:
		return fmt.Errorf("-envoys must be 0–200")
	case o.envoyWatch < 0 || o.envoyWatch > o.envoys:
		return fmt.Errorf("-envoy-watch must be 0–%d (the Envoys)", o.envoys)
	case o.envoys > 0 && o.target != "cairn":
		return fmt.Errorf("-envoys needs -target cairn (Envoy needs clusters over CDS)")
	case o.envoyPoll < time.Millisecond:
		return fmt.Errorf("-envoy-poll must be at least 1ms")
	case o.hostile < 0 || o.hostileNames < 0 || o.hostileReal < 0 || o.hostileBatch < 1 || o.hostileConns < 1 || o.hostileSettle <= 0:
		return fmt.Errorf("-hostile, -hostile-names and -hostile-real must not be negative, -hostile-batch, -hostile-conns and -hostile-settle must be positive")
	case o.hostileReal > o.services:
		return fmt.Errorf("-hostile-real must be at most %d (the services)", o.services)
	case o.hostileSotw < 0 || o.hostileSotw > o.hostile:
		return fmt.Errorf("-hostile-sotw must be 0–%d (-hostile)", o.hostile)
	case o.honestSrcs < 0 || o.honestSrcs > 65000:
		return fmt.Errorf("-honest-srcs must be 0–65000")
	case o.rate <= 0 || o.duration <= 0 || o.admitTimeout <= 0 || o.linger <= 0 || o.timeout <= 0:
		return fmt.Errorf("-rate, -duration, -admit-timeout, -linger and -timeout must be positive")
	}
	return o.checkEvacuation()
}
