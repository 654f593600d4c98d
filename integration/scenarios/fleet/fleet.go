// Package fleet is a simulated fleet: one process holding thousands of
// service instances, each a real listener on a loopback address of its
// own, and an HTTP API to change how each one behaves. The scenarios
// (package scenarios) run it as a process of its own (cmd/cairn-fleet),
// so that its listeners live apart from the test and the servers.
//
// # Instances
//
// The fleet reads a Spec (JSON) naming every instance: its id, the
// service it belongs to ("ns/svc"), its zone, its kind and the address
// and port it listens on. The scenarios give an instance in zone a, b or
// c an address 127.Z.H.L with Z 11, 12 or 13, and every instance of a
// service the service's port. By kind:
//
//   - http: GET /ready answers 200 (the active check); a request for /
//     is a caller's, answered 200 with the instance id as the body; any
//     other path answers 404 (a check pointed at the wrong path fails).
//     Every answer carries the header X-Cairn-Instance: <id>.
//   - grpc: grpc.health.v1.Health: Check answers SERVING and Watch sends
//     SERVING, with the response header metadata x-cairn-instance: <id>.
//     A caller's request is a Check naming the service "caller"
//     (CallerService); any other Check is a probe's.
//   - tcp: accepts, writes the instance id and a newline, and closes.
//
// # Modes
//
// Each instance has a mode:
//
//   - ok: as above.
//   - refuse: its listener is closed, and every connection to it: a
//     connection is refused. Any other mode listens again on the same
//     address.
//   - slow: every caller's request (HTTP GET /, a gRPC Check of
//     CallerService, a TCP connection) waits the mode's delay first;
//     GET /ready and a probe's Check stay fast and pass, so HTTP and
//     gRPC probes stay green (a TCP probe's connection waits too).
//   - down: the readiness path fails: GET /ready answers 503, a probe's
//     Check NOT_SERVING; a caller's request is still served. A TCP
//     instance has no readiness path: down serves as ok.
//
// # Control API
//
// The process prints one line, "ready <URL>", on its standard output
// once every listener and the control API listen; URL is the control
// API's base. Its routes (JSON bodies):
//
//   - GET /healthz: 200.
//   - GET /v1/instances: every instance with its mode and the number of
//     callers' requests it has served: [{"id", "service", "zone",
//     "kind", "addr", "port", "mode", "delay", "served"}].
//   - POST /v1/mode: {"ids": [..], "service": "ns/svc", "zone": "a",
//     "all": true, "mode": "ok|refuse|slow|down", "delay": "2s"} sets the
//     mode of the instances selected: those named in ids, or else those
//     of service and zone (either or both), or else all of them if all
//     is true. A selection must be given; delay is required with slow
//     and refused with any other mode. The answer is {"changed": N}, or
//     400 naming the field and the rule.
//   - GET /v1/stats: {"instances", "listening", "goroutines",
//     "rss_bytes"}.
//
// Control is the API's client.
package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Kinds of instance.
const (
	KindHTTP = "http"
	KindGRPC = "grpc"
	KindTCP  = "tcp"
)

// Modes of an instance.
const (
	ModeOK     = "ok"
	ModeRefuse = "refuse"
	ModeSlow   = "slow"
	ModeDown   = "down"
)

// InstanceHeader is the HTTP response header, and (lower case) the gRPC
// response header metadata, naming the instance that answered.
const InstanceHeader = "X-Cairn-Instance"

// Instance is one instance of the fleet.
type Instance struct {
	ID      string `json:"id"`
	Service string `json:"service"`
	Zone    string `json:"zone"`
	Kind    string `json:"kind"`
	Addr    string `json:"addr"`
	Port    int    `json:"port"`
}

// HostPort is the instance's listening address.
func (i Instance) HostPort() string { return net.JoinHostPort(i.Addr, fmt.Sprint(i.Port)) }

// Spec is what the fleet process holds.
type Spec struct {
	// Control is the control API's listening address; empty:
	// 127.0.0.1:0.
	Control   string     `json:"control"`
	Instances []Instance `json:"instances"`
}

// Validate checks the spec: every instance has an id, a known kind, an
// IP address and a port, and no two share an id or an address.
func (s Spec) Validate() error {
	ids := make(map[string]bool, len(s.Instances))
	addrs := make(map[string]string, len(s.Instances))
	for n, i := range s.Instances {
		field := fmt.Sprintf("instances[%d]", n)
		if i.ID == "" {
			return fmt.Errorf("%s.id: empty; every instance needs an id", field)
		}
		if ids[i.ID] {
			return fmt.Errorf("%s.id: %q appears twice; ids are unique", field, i.ID)
		}
		ids[i.ID] = true
		switch i.Kind {
		case KindHTTP, KindGRPC, KindTCP:
		default:
			return fmt.Errorf("%s.kind: %q; want http, grpc or tcp", field, i.Kind)
		}
		if _, err := netip.ParseAddr(i.Addr); err != nil {
			return fmt.Errorf("%s.addr: %q is not an IP address", field, i.Addr)
		}
		if i.Port < 1 || i.Port > 65535 {
			return fmt.Errorf("%s.port: %d is out of range 1-65535", field, i.Port)
		}
		if o, ok := addrs[i.HostPort()]; ok {
			return fmt.Errorf("%s: %s listens on %s already", field, o, i.HostPort())
		}
		addrs[i.HostPort()] = i.ID
	}
	return nil
}

// Duration is a time.Duration that reads and writes as a Go duration
// string in JSON.
type Duration time.Duration

// MarshalJSON writes d as "1.5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "1.5s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a duration is a string such as \"1.5s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ModeRequest is the body of POST /v1/mode.
type ModeRequest struct {
	IDs     []string `json:"ids,omitempty"`
	Service string   `json:"service,omitempty"`
	Zone    string   `json:"zone,omitempty"`
	All     bool     `json:"all,omitempty"`
	Mode    string   `json:"mode"`
	Delay   Duration `json:"delay,omitempty"`
}

// validate checks a mode request, naming the field at fault.
func (r ModeRequest) validate() error {
	switch r.Mode {
	case ModeSlow:
		if r.Delay <= 0 {
			return errors.New("delay: required and positive with mode slow")
		}
	case ModeOK, ModeRefuse, ModeDown:
		if r.Delay != 0 {
			return fmt.Errorf("delay: only mode slow takes a delay, not %s", r.Mode)
		}
	default:
		return fmt.Errorf("mode: %q; want one of ok, refuse, slow, down", r.Mode)
	}
	if len(r.IDs) == 0 && r.Service == "" && r.Zone == "" && !r.All {
		return errors.New("ids, service, zone, all: none given; a mode needs a selection")
	}
	if len(r.IDs) > 0 && (r.Service != "" || r.Zone != "" || r.All) {
		return errors.New("ids: give ids alone, or service and zone, or all")
	}
	return nil
}

// selects reports whether the request selects instance i.
func (r ModeRequest) selects(i Instance, named map[string]bool) bool {
	if len(r.IDs) > 0 {
		return named[i.ID]
	}
	if r.All && r.Service == "" && r.Zone == "" {
		return true
	}
	return (r.Service == "" || r.Service == i.Service) && (r.Zone == "" || r.Zone == i.Zone)
}

// InstanceState is one instance as GET /v1/instances lists it.
type InstanceState struct {
	Instance
	Mode   string   `json:"mode"`
	Delay  Duration `json:"delay,omitempty"`
	Served int64    `json:"served"`
}

// Stats is GET /v1/stats.
type Stats struct {
	Instances  int   `json:"instances"`
	Listening  int   `json:"listening"`
	Goroutines int   `json:"goroutines"`
	RSSBytes   int64 `json:"rss_bytes"`
}

// parseRSS reads VmRSS from the text of /proc/self/status, in bytes.
func parseRSS(status string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
