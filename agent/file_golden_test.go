package agent

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cairn-sd/cairn/internal/golden"

	"github.com/cairn-sd/cairn/status/tablefile"
)

// TestKeptFileGolden: the table file's golden (status/tablefile's, an
// agent's kept views with members of every verdict, lifecycle and flag)
// restores to the views it was written from. The file's bytes are
// pinned there; this pins what the agent makes of them.
func TestKeptFileGolden(t *testing.T) {
	s, err := tablefile.Load(filepath.Join("..", "status", "tablefile", "testdata", "table.golden"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := viewsOf(s)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, v := range vs {
		fmt.Fprintf(&b, "view %s revision %d received %s refreshed %s service %s/%s\n", v.name, v.got.Revision,
			v.received.Format("2006-01-02T15:04:05Z07:00"), v.refreshed.Format("2006-01-02T15:04:05Z07:00"),
			v.got.Service.Namespace, v.got.Service.Name)
		for _, in := range v.got.Instances {
			fmt.Fprintf(&b, "  %s incarnation %d %s/%s verdict %s lifecycle %s flags %s weight %d/%d addrs %v ports %v\n",
				in.ID, in.Incarnation, in.Region, in.Zone, in.Verdict, in.Lifecycle, in.Flags, in.Weight, in.BaseWeight, in.Addrs, in.Ports)
		}
	}
	golden.Check(t, "kept-views.golden", b.Bytes())
}
