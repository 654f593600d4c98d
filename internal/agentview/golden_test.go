package agentview

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"reflect"
	"testing"

	"github.com/cairn-sd/cairn/internal/golden"

	"google.golang.org/protobuf/proto"

	"github.com/cairn-sd/cairn/status"
)

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
	want := golden.Check(t, "view.golden", got)
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
