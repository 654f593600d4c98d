package xdsserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-sd/cairn/status"
)

// Versions on the wire (a delta resource's version, a state-of-the-world
// response's version_info) are "<revision>-<digest>": the store revision
// of the table the response was built from, then a digest of the
// content. The digest is the resource's identity — what decides whether
// a client already holds it, on any server, after any restart — and the
// revision says how new the table that sent it was, so that a server
// whose table is older than what a client reports holding (restored from
// disk, or behind) sends it nothing older (see holds). A version without
// a "-" (what servers before this format sent) is a digest at revision
// 0: it never holds anything back.

// Digest returns a message's digest: of its deterministic encoding, so
// that the same content has the same digest on every server and after
// every restart.
func Digest(m proto.Message) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("xdsserver: encoding %T: %w", m, err)
	}
	return digestOf(b), nil
}

// digestOf is the digest of a deterministic encoding.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:versionDigestN])
}

// FormatVersion returns the wire version of content digest sent from a
// table at store revision rev.
func FormatVersion(rev uint64, digest string) string {
	return strconv.FormatUint(rev, 10) + "-" + digest
}

// ParseVersion splits a wire version into its revision and digest. A
// version of another form (an older server's bare digest, or anything a
// client makes up) is all digest, at revision 0.
func ParseVersion(v string) (rev uint64, digest string) {
	head, tail, ok := strings.Cut(v, "-")
	if !ok {
		return 0, v
	}
	rev, err := strconv.ParseUint(head, 10, 64)
	if err != nil {
		return 0, v
	}
	return rev, tail
}

// holds reports whether a client that holds version held (at the store
// revision it names) must be sent nothing from a table at revision rev
// whose content for it has digest (exists false: the table has no such
// resource): the table is older than what the client holds, and says
// something else. The server neither sends the older content nor removes
// the resource; it waits for a table that passes the client's revision.
// The same content is no older, whatever table it comes from.
func holds(held string, rev uint64, digest string, exists bool) (bool, uint64) {
	hrev, hdigest := ParseVersion(held)
	return holdsParsed(hrev, hdigest, rev, digest, exists)
}

// holdsParsed is holds for a held version already parsed.
func holdsParsed(hrev uint64, hdigest string, rev uint64, digest string, exists bool) (bool, uint64) {
	if hrev <= rev || exists && hdigest == digest {
		return false, 0
	}
	return true, hrev
}

// Assignment returns the assignment the server sends for port of the
// service with id service in table t to a subscriber at loc, and its
// digest: the second part of its version, which the first part's
// revision (t's) completes. It is the hub's own build, for a replay of
// what a subscriber was sent from a table of the past.
func Assignment(t *status.Table, service uint32, port string, loc status.Locality) (*endpointv3.ClusterLoadAssignment, string, error) {
	svc, ok := t.Directory().Service(service)
	if !ok {
		return nil, "", fmt.Errorf("xdsserver: the table holds no service %d", service)
	}
	cla, _ := buildAssignment(t, service, svc, port, loc)
	digest, err := Digest(cla)
	return cla, digest, err
}
