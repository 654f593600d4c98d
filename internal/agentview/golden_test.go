package agentview

import (
	"bytes"
	"encoding/hex"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairn-sd/cairn/status"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from what the code writes today")

// TestGoldenEncoding pins the bytes of a view (deterministic protobuf,
// in hex) with a member of every verdict, lifecycle and flag: an agent
// reads what servers of another version send.
func TestGoldenEncoding(t *testing.T) {
	v := sample()
	verdicts := []status.Verdict{status.Degraded, status.Quarantined}
	for i, f := range []status.Flags{status.Eligible | status.HealthDisregarded | status.DependencyDegraded,
		status.LeaseExpired | status.WithdrawalDeferred | status.OutcomeDegraded | 0x80} {
		in := Instance{InstanceInfo: status.InstanceInfo{ID: string(rune('d' + i)), Incarnation: uint64(4 + i),
			Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.4")}, Ports: map[string]uint16{"http": 80}},
			Region: "eu", Zone: "eu-1b", Verdict: verdicts[i], Lifecycle: status.Terminated - status.Lifecycle(i), Flags: f, BaseWeight: 100}
		if f.Has(status.Eligible) {
			in.Weight = 50
		}
		v.Instances = append(v.Instances, in)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	got := []byte(hex.EncodeToString(b) + "\n")
	path := filepath.Join("testdata", "view.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the view's encoding changed; got\n%s\nwant\n%s", got, want)
	}
	// What the golden bytes hold decodes to the view they were made from.
	raw, _ := hex.DecodeString(string(bytes.TrimSpace(want)))
	cla := v.Encode()
	proto.Reset(cla)
	if err := proto.Unmarshal(raw, cla); err != nil {
		t.Fatal(err)
	}
	back, err := Decode(cla)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("the golden view decodes as\n%+v\nwant\n%+v", back, v)
	}
}
