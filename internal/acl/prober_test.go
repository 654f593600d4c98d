package acl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/internal/acl"
)

// TestCheckProber: a server's probe token is refused before the server
// starts when this ACL knows the leader would refuse it, and left to the
// leader when this ACL does not know it.
func TestCheckProber(t *testing.T) {
	const (
		admin    = "admin-secret-0123456789abc"
		proberN1 = "prober-n1-0123456789abcdef"
		proberN2 = "prober-n2-0123456789abcdef"
		prober   = "prober-none-0123456789abcd"
		reader   = "reader-shop-0123456789abcd"
	)
	toks := []acl.Token{
		{Secret: admin, Scope: acl.Admin},
		{Secret: proberN1, Scope: acl.Prober, Node: "n1"},
		{Secret: proberN2, Scope: acl.Prober, Node: "n2"},
		{Secret: prober, Scope: acl.Prober},
		{Secret: reader, Scope: acl.Reader, Namespaces: []string{"shop"}},
	}
	on, err := acl.New(acl.Config{Enabled: true, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	off, err := acl.New(acl.Config{Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		authz *acl.Authorizer
		token string
		want  string // a fragment of the error; "": accepted
	}{
		{"its own node's prober token", on, proberN1, ""},
		{"an admin token", on, admin, ""},
		{"no token", on, "", ""},
		{"a token only the cluster knows", on, "stored-token-0123456789abcd", ""},
		{"ACLs off", off, proberN2, ""},
		{"another node's prober token", on, proberN2, "prober token of node n2 may not report as n1"},
		{"a prober token without node", on, prober, "names no node"},
		{"a reader token", on, reader, "reader token may not send probe results"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.authz.CheckProber(c.token, "n1")
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) || !errors.Is(err, acl.ErrDenied) {
				t.Errorf("error %q: want %q, wrapping ErrDenied", err, c.want)
			}
			if strings.Contains(err.Error(), c.token) {
				t.Errorf("error %q repeats the secret", err)
			}
		})
	}
}
