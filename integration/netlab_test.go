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

// netlab is a small network of its own for the tests whose fault lives
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
type netlab struct {
	t *testing.T
}

const (
	labHosts  = 3
	labNet    = "10.199.0"
	labSwitch = "sdsw"
	labBridge = "br0"
	labServer = labNet + ".254"
	labLink   = "sdroot0"
	labPeer   = "sdrootp0"
)

// labHost is the namespace of host i (from 1).
func labHost(i int) string { return "sd" + strconv.Itoa(i) }

// labAddr is host i's address.
func labAddr(i int) string { return fmt.Sprintf("%s.%d", labNet, i) }

// needNetlab brings the network up, or skips the test where it cannot
// (not root on Linux, no ip or iptables); under CI=true it fails instead.
func needNetlab(t *testing.T) *netlab {
	t.Helper()
	needProcesses(t)
	missing := func(why string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("netlab: %s, and nothing may skip under CI=true", why)
		}
		t.Skipf("netlab: %s", why)
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		missing("needs root on Linux")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " is not installed (.ci/run installs iproute2 and iptables)")
		}
	}
	l := &netlab{t: t}
	l.down()
	t.Cleanup(l.down)
	l.up()
	return l
}

// up makes the switch, the hosts and the link from this namespace.
func (l *netlab) up() {
	l.t.Helper()
	l.ip("netns", "add", labSwitch)
	l.ip("-n", labSwitch, "link", "add", labBridge, "type", "bridge")
	l.ip("-n", labSwitch, "link", "set", labBridge, "up")
	for i := 1; i <= labHosts; i++ {
		ns, veth, port := labHost(i), fmt.Sprintf("sdv%d", i), fmt.Sprintf("sdp%d", i)
		l.ip("netns", "add", ns)
		l.ip("link", "add", veth, "type", "veth", "peer", "name", port)
		l.ip("link", "set", veth, "netns", ns)
		l.ip("link", "set", port, "netns", labSwitch)
		l.ip("-n", labSwitch, "link", "set", port, "master", labBridge, "up")
		l.ip("-n", ns, "link", "set", "lo", "up")
		l.ip("-n", ns, "addr", "add", labAddr(i)+"/24", "dev", veth)
		l.ip("-n", ns, "link", "set", veth, "up")
	}
	l.ip("link", "add", labLink, "type", "veth", "peer", "name", labPeer)
	l.ip("link", "set", labPeer, "netns", labSwitch)
	l.ip("-n", labSwitch, "link", "set", labPeer, "master", labBridge, "up")
	l.ip("addr", "add", labServer+"/24", "dev", labLink)
	l.ip("link", "set", labLink, "up")
}

// down removes whatever of the network exists, ignoring what does not:
// deleting a namespace deletes its links, and a veth goes with its peer.
func (l *netlab) down() {
	_ = exec.Command("ip", "link", "del", labLink).Run()
	for i := 1; i <= labHosts; i++ {
		_ = exec.Command("ip", "netns", "del", labHost(i)).Run()
	}
	_ = exec.Command("ip", "netns", "del", labSwitch).Run()
}

// isolate drops, inside host a, every packet from and to host b: a
// partition between them, both ways.
func (l *netlab) isolate(a, b int) {
	l.t.Helper()
	l.iptables(a, "-A", "INPUT", "-s", labAddr(b), "-j", "DROP")
	l.iptables(a, "-A", "OUTPUT", "-d", labAddr(b), "-j", "DROP")
}

// dropFrom drops, inside host a, every packet from addr: what a sends
// still leaves, nothing from addr arrives.
func (l *netlab) dropFrom(a int, addr string) {
	l.t.Helper()
	l.iptables(a, "-A", "INPUT", "-s", addr, "-j", "DROP")
}

// heal removes every fault rule of host a.
func (l *netlab) heal(a int) {
	l.t.Helper()
	l.iptables(a, "-F")
}

func (l *netlab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (l *netlab) iptables(host int, args ...string) {
	l.t.Helper()
	if out, err := inNetns(host, "iptables", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("iptables in %s: %s: %v\n%s", labHost(host), strings.Join(args, " "), err, out)
	}
}

// inNetns runs cmd in host sdN's namespace.
func inNetns(host int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", labHost(host), name}, args...)...)
}
