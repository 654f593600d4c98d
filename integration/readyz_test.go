package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestReadyMeansServing: /readyz turns 200 only once DNS and xDS can
// answer. A fresh `cairn server --dev` is started 50 times in a row; each
// time, the first SOA query and the first delta ADS stream sent right
// after the first 200 succeed (SPEC §6). Before, the replica's catching
// up made the node ready while the first status table was still to come,
// and DNS answered SERVFAIL (EDE 14) and xDS UNAVAILABLE in that window.
func TestReadyMeansServing(t *testing.T) {
	t.Parallel()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	starts := 50
	if testing.Short() {
		starts = 5
	}
	for i := range starts {
		if err := readyThenServe(t, bin, i); err != nil {
			t.Fatalf("start %d of %d: %v", i+1, starts, err)
		}
	}
}

// readyThenServe starts one fresh server, waits for its first /readyz 200
// and then at once asks for the zone's SOA and opens a delta ADS stream.
func readyThenServe(t *testing.T, bin string, i int) error {
	ports, err := FreePorts(4)
	if err != nil {
		return err
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", ports[3])
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("server-%d.log", i))
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	srv := exec.Command(bin, "server", "--dev", "--lame-duck", "0s", "--probe-workers", "0",
		"--http-addr", httpAddr, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--dns-addr", dnsAddr, "--grpc-addr", grpcAddr)
	srv.Stdout, srv.Stderr, srv.Env = logf, logf, childEnv()
	if err := srv.Start(); err != nil {
		return err
	}
	fail := func(err error) error {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w\nserver log:\n%s", err, b)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()

	// The first 200, asked as often as a load balancer's tight probe.
	hc := &http.Client{Timeout: time.Second}
	var notReady string
	err = Poll(20*time.Second, 5*time.Millisecond, func() error {
		resp, err := hc.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			notReady = string(body)
			return fmt.Errorf("/readyz %d %s", resp.StatusCode, body)
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}

	q := new(dns.Msg)
	q.SetQuestion("cairn.internal.", dns.TypeSOA)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, dnsAddr)
	switch {
	case err != nil:
		return fail(fmt.Errorf("the first SOA query after /readyz 200: %v", err))
	case r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1:
		return fail(fmt.Errorf("the first SOA query after /readyz 200: %s with %d answers, EDE %v (503 before said %q)",
			dns.RcodeToString[r.Rcode], len(r.Answer), edeCodes(r), notReady))
	}

	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err == nil {
		err = s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "ready-test"}, TypeUrl: resourcev3.ClusterType})
	}
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		return fail(fmt.Errorf("the first delta ADS stream after /readyz 200: %v", err))
	}
	return nil
}
