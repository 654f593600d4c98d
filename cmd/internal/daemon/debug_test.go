package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestDebugAddr: --debug-addr takes loopback HOST:PORT only (the profiles
// have no ACL), and what it serves is the pprof index, on a real socket,
// until its context ends.
func TestDebugAddr(t *testing.T) {
	for _, bad := range []string{"8490", "0.0.0.0:8490", "10.0.0.1:8490", ":8490"} {
		if err := CheckDebugAddr(bad); err == nil || !strings.Contains(err.Error(), "--debug-addr") {
			t.Errorf("CheckDebugAddr(%q) = %v, want an error naming --debug-addr", bad, err)
		}
	}
	for _, good := range []string{"", "127.0.0.1:8490", "[::1]:8490", "localhost:8490"} {
		if err := CheckDebugAddr(good); err != nil {
			t.Errorf("CheckDebugAddr(%q) = %v", good, err)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeDebug(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/heap?debug=1")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Errorf("/debug/pprof/heap: %s, %.80q", resp.Status, body)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeDebug after its context ended: %v", err)
	}
}
