package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/client"
)

// quickstart returns the `$cairn ...` commands of README.md's Quickstart,
// continuation lines joined, with the trailing comment of each.
func quickstart(t *testing.T) (cmds, comments []string) {
	t.Helper()
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, block := false, false
	var cur string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Quickstart"
		case in && strings.HasPrefix(line, "```"):
			block = !block
		case in && block:
			if cur == "" && !strings.HasPrefix(line, "$cairn ") {
				continue
			}
			body, comment, _ := strings.Cut(line, "#")
			body = strings.TrimSpace(body)
			if strings.HasSuffix(body, `\`) {
				cur += strings.TrimSuffix(body, `\`) + " "
				continue
			}
			cmds = append(cmds, cur+body)
			comments = append(comments, comment)
			cur = ""
		}
	}
	if len(cmds) < 5 {
		t.Fatalf("found %d quickstart commands in README.md", len(cmds))
	}
	return cmds, comments
}

// TestReadmeQuickstart runs the README's quickstart, command by command,
// against a --dev server seeded as `make run` seeds it.
func TestReadmeQuickstart(t *testing.T) {
	needProcesses(t)
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	srv := exec.Command(bin, "server", "--dev", "--data-dir", filepath.Join(dir, "data"), "--lame-duck", "0s",
		"--http-addr", addr, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--dns-addr", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	srv.Stdout, srv.Stderr, srv.Env = logf, logf, childEnv()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("server log:\n%s", b)
		}
	})
	cl, err := client.New(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 15*time.Second, func() error {
		if !cl.Ready(t.Context()) {
			return fmt.Errorf("%s is not ready", addr)
		}
		return nil
	})

	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"--addr", "http://" + addr}, args...)...)
		cmd.Env = childEnv()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// What scripts/run-demo.sh does after starting the server.
	if out, err := run("apply", "-f", "../deploy/demo.yaml"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	for i := 1; i <= 3; i++ {
		if out, err := run("register", "--instance", fmt.Sprintf("web-%d", i), "--address", fmt.Sprintf("127.0.0.1%d", i),
			"--port", "http=8080", "--region", "local", "--zone", fmt.Sprintf("zone-%d", (i-1)%2+1), "--lease-ttl", "24h", "demo/web"); err != nil {
			t.Fatalf("register: %v\n%s", err, out)
		}
	}

	// The quickstart replays a second back: wait until the node's history
	// reaches that far, as it has for anyone who read this far.
	Eventually(t, 15*time.Second, func() error {
		out, err := run("replay", "--at", "-1s", "demo/web")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	incarnation := regexp.MustCompile(`incarnation: (\d+)`)
	n := ""
	cmds, comments := quickstart(t)
	for i, line := range cmds {
		args := strings.Fields(strings.TrimPrefix(line, "$cairn "))
		for j, a := range args {
			if a == "N" {
				args[j] = n
			}
		}
		out, err := run(args...)
		wantFail := strings.Contains(comments[i], "409")
		switch {
		case wantFail && err == nil:
			t.Errorf("%s: succeeded; the README says it fails with 409:\n%s", line, out)
		case wantFail && !strings.Contains(out, "409"):
			t.Errorf("%s: %v; want a 409:\n%s", line, err, out)
		case !wantFail && err != nil:
			t.Errorf("%s: %v\n%s", line, err, out)
		}
		if args[0] == "register" {
			m := incarnation.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("%s printed no incarnation:\n%s", line, out)
			}
			n = m[1]
		}
		if args[0] == "endpoints" && !strings.Contains(out, "web-1") {
			t.Errorf("%s does not show the demo instances:\n%s", line, out)
		}
	}

	// The quickstart ends with a dig of the demo service: ask the same
	// name of the server's DNS port and get the demo addresses (web-4 is
	// drained by then).
	name := readmeDigName(t)
	Eventually(t, 15*time.Second, func() error {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		r, _, err := new(dns.Client).Exchange(q, fmt.Sprintf("127.0.0.1:%d", ports[2]))
		if err != nil {
			return err
		}
		var got []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		slices.Sort(got)
		if want := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}; !slices.Equal(got, want) {
			return fmt.Errorf("dig %s: %v, want %v", name, got, want)
		}
		return nil
	})
}

// readmeDigName returns the name the quickstart's dig line asks for.
func readmeDigName(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "dig @127.0.0.1 -p 8053 ") {
			continue
		}
		body, _, _ := strings.Cut(line, "#")
		f := strings.Fields(body)
		return f[len(f)-1]
	}
	t.Fatal("README.md's quickstart has no `dig @127.0.0.1 -p 8053 ...` line")
	return ""
}
