package integration

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Netlab is a small network of its own for the tests whose fault lives
// in the network: hosts sd1..sd3, each a network namespace with one veth
// (sdvN, address 10.199.0.N/24) plugged into a bridge (br0) in the
// namespace sdsw, and this namespace plugged in too, through a veth pair
// whose root side (sdroot0) is 10.199.0.254, so that a server on it
// reaches the hosts and they reach it. Faults are iptables rules inside a
// host's namespace. Everything it makes is removed when the test ends,
// and anything left by an earlier run is removed before it starts. It
// needs root, ip and iptables: a test that cannot have them skips, or
// fails under CI=true (.ci/run installs iproute2 and iptables).
//
// It is driven with ip(8) and iptables(8) rather than netlink from Go: the
// commands are what an operator would type to reproduce a failure, and
// each one is in the test log when it fails.
type Netlab struct {
	t testing.TB
}

// The netlab's shape.
const (
	// LabHosts is the number of hosts, sd1..sdN.
	LabHosts = 3
	// LabNet is the hosts' /24, without its last byte.
	LabNet = "10.199.0"
	// LabServer is this namespace's address on the bridge.
	LabServer = LabNet + ".254"
	labSwitch = "sdsw"
	labBridge = "br0"
	labLink   = "sdroot0"
	labPeer   = "sdrootp0"
)

// LabHost is the namespace of host i (from 1).
func LabHost(i int) string { return "sd" + strconv.Itoa(i) }

// LabAddr is host i's address.
func LabAddr(i int) string { return fmt.Sprintf("%s.%d", LabNet, i) }

// NeedNetlab brings the network up, or skips the test where it cannot
// (-short, not root on Linux, no ip or iptables); under CI=true it fails
// instead. The network is removed when the test ends.
func NeedNetlab(t testing.TB) *Netlab {
	t.Helper()
	NeedProcesses(t)
	missing := func(why string) { t.Helper(); Missing(t, "netlab", why) }
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		missing("needs root on Linux")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " is not installed (.ci/run installs iproute2 and iptables)")
		}
	}
	// The network's names are fixed: a test process holds it from Up
	// to Down, and another (go test runs packages in parallel) waits.
	unlock, err := lockNetlab()
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	l := &Netlab{t: t}
	l.Down()
	t.Cleanup(func() {
		l.Down()
		unlock()
	})
	l.Up()
	return l
}

// Up makes the switch, the hosts and the link from this namespace.
// NeedNetlab calls it; a test calls it again only after Down.
func (l *Netlab) Up() {
	l.t.Helper()
	l.ip("netns", "add", labSwitch)
	l.ip("-n", labSwitch, "link", "add", labBridge, "type", "bridge")
	l.ip("-n", labSwitch, "link", "set", labBridge, "up")
	for i := 1; i <= LabHosts; i++ {
		ns, veth, port := LabHost(i), fmt.Sprintf("sdv%d", i), fmt.Sprintf("sdp%d", i)
		l.ip("netns", "add", ns)
		l.ip("link", "add", veth, "type", "veth", "peer", "name", port)
		l.ip("link", "set", veth, "netns", ns)
		l.ip("link", "set", port, "netns", labSwitch)
		l.ip("-n", labSwitch, "link", "set", port, "master", labBridge, "up")
		l.ip("-n", ns, "link", "set", "lo", "up")
		l.ip("-n", ns, "addr", "add", LabAddr(i)+"/24", "dev", veth)
		l.ip("-n", ns, "link", "set", veth, "up")
	}
	l.ip("link", "add", labLink, "type", "veth", "peer", "name", labPeer)
	l.ip("link", "set", labPeer, "netns", labSwitch)
	l.ip("-n", labSwitch, "link", "set", labPeer, "master", labBridge, "up")
	l.ip("addr", "add", LabServer+"/24", "dev", labLink)
	l.ip("link", "set", labLink, "up")
}

// Down removes whatever of the network exists, ignoring what does not:
// deleting a namespace deletes its links, and a veth goes with its peer.
func (l *Netlab) Down() {
	_ = exec.Command("ip", "link", "del", labLink).Run()
	for i := 1; i <= LabHosts; i++ {
		_ = exec.Command("ip", "netns", "del", LabHost(i)).Run()
	}
	_ = exec.Command("ip", "netns", "del", labSwitch).Run()
}

// Isolate drops, inside host a, every packet from and to host b: a
// partition between them, both ways.
func (l *Netlab) Isolate(a, b int) {
	l.t.Helper()
	l.IPTables(a, "-A", "INPUT", "-s", LabAddr(b), "-j", "DROP")
	l.IPTables(a, "-A", "OUTPUT", "-d", LabAddr(b), "-j", "DROP")
}

// DropFrom drops, inside host a, every packet from addr: what a sends
// still leaves, nothing from addr arrives.
func (l *Netlab) DropFrom(a int, addr string) {
	l.t.Helper()
	l.IPTables(a, "-A", "INPUT", "-s", addr, "-j", "DROP")
}

// Range gives host h every address of prefix (a CIDR), as this
// namespace's loopback holds 127.0.0.0/8: a local route of the whole
// prefix on h's lo, so that thousands of listeners bind an address each
// with no address configured; and routes prefix to h from this
// namespace, through netlab's link, from src (one of this namespace's
// addresses on the link: LabServer, or one Alias added). The route goes
// with the link when the network is removed.
func (l *Netlab) Range(h int, prefix, src string) {
	l.t.Helper()
	l.ip("-n", LabHost(h), "route", "add", "local", prefix, "dev", "lo")
	l.ip("route", "add", prefix, "via", LabAddr(h), "dev", labLink, "src", src)
}

// Alias adds addr (in LabNet) to this namespace's side of the link,
// beside LabServer: a second source address here, for traffic that a
// host's rules must tell from the servers'. It goes with the link.
func (l *Netlab) Alias(addr string) {
	l.t.Helper()
	l.ip("addr", "add", addr+"/32", "dev", labLink)
}

// Heal removes every fault rule of host a.
func (l *Netlab) Heal(a int) {
	l.t.Helper()
	l.IPTables(a, "-F")
}

func (l *Netlab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// IPTables runs iptables with args inside host's namespace, and fails
// the test if it fails: a fault the named methods do not make.
func (l *Netlab) IPTables(host int, args ...string) {
	l.t.Helper()
	if out, err := InNetns(host, "iptables", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("iptables in %s: %s: %v\n%s", LabHost(host), strings.Join(args, " "), err, out)
	}
}

// InNetns returns the command that runs name with args in host sdN's
// namespace.
func InNetns(host int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", LabHost(host), name}, args...)...)
}
