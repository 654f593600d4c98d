package dnsserver

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// emfileListener fails its first n Accepts as a process out of file
// descriptors does, then accepts from a real listener. A stand-in: a
// test cannot take the process's descriptors away from everything else
// that runs in it.
type emfileListener struct {
	net.Listener
	n int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptBacksOffWithoutDescriptors: an accept that fails for lack of
// file descriptors is retried after a growing pause, counted, not
// returned to the serve loop (which would retry at once, spinning).
func TestAcceptBacksOffWithoutDescriptors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	waits := 0
	l := newCapListener(&emfileListener{Listener: ln, n: 3}, 2, func() {}, func() { waits++ })
	// The kernel completes the connection before any Accept.
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	start := time.Now()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after 3 EMFILE: %v", err)
	}
	defer c.Close()
	if waits != 3 {
		t.Errorf("%d back-offs counted, want 3", waits)
	}
	if d := time.Since(start); d < 35*time.Millisecond { // 5 + 10 + 20 ms
		t.Errorf("accepted %v after three EMFILE; want the back-off of at least 35ms", d)
	}
	// A closed listener's error is returned, not retried.
	_ = ln.Close()
	if _, err := l.Accept(); err == nil {
		t.Error("Accept on a closed listener returned no error")
	}
}
