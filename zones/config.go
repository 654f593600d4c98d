package zones

import (
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/internal/dnsname"
)

// Config describes the zone. A zero field means "use the default"; New
// applies the defaults and rejects anything else that is wrong with a
// *FieldError naming the field and the rule.
//
// Names may be given in any case, with or without the trailing dot; the
// zone keeps them lower-case and fully qualified.
type Config struct {
	// Domain is the zone's apex, SPEC §3 --domain. Its labels are host
	// name labels (letters, digits, '-'). Defaults to "cairn.internal.".
	Domain string

	// NS lists the zone's name servers, in the order the NS records are
	// served. Each is a host name (RFC 1123 labels), listed once, and not
	// at or under svc.<Domain>, which belongs to services. The static
	// records may add more with NS records at the apex, served after
	// these with TTL NSTTL (an RRset has one TTL, RFC 2181 §5.2). When
	// neither names one, defaults to "ns.<Domain>" — which is in the zone,
	// so NSAddrs must then give its address.
	NS []string
	// NSAddrs gives the addresses of the name servers that are in the
	// zone (at or under Domain): without an address, a resolver that
	// follows the NS record back into the zone could never reach it
	// (RFC 1034 §4.2.1 glue). An in-zone name server needs its addresses
	// here or as A/AAAA records in the static records, not both. A key
	// must be one of the name servers, and in the zone: cairn is not
	// authoritative for a name server elsewhere, so it serves no address
	// for it. The addresses become the name server's A and AAAA records,
	// with TTL NSTTL, and are returned by Glue.
	NSAddrs map[string][]netip.Addr
	// NSTTL is the TTL of the NS records and of the A/AAAA records made
	// from NSAddrs. Name servers change rarely and a resolver re-asks for
	// them at each expiry, so it is long. Defaults to 1h.
	NSTTL time.Duration

	// MName is the SOA's primary name server. Any valid host name; it need
	// not be in NS. Defaults to the first name server.
	MName string
	// RName is the SOA's responsible mailbox, as a domain name
	// ("hostmaster.cairn.internal.") or an address
	// ("dns-admin@example.com", whose local part's dots are escaped, RFC
	// 1035 §8). Defaults to "hostmaster.<Domain>".
	RName string
	// Refresh, Retry and Expire are the SOA's timers for secondary
	// servers. cairn serves no zone transfer (SPEC §8), so they are
	// informative; they must still be consistent: Retry ≤ Refresh ≤
	// Expire. Default to 1h, 10m and 24h (RFC 1912 §2.2's ranges).
	Refresh time.Duration
	Retry   time.Duration
	Expire  time.Duration
	// Minimum is the negative-caching TTL: the SOA's MINIMUM field, and
	// the TTL of the SOA record itself, since a resolver caches a
	// negative answer for the lesser of the two (RFC 2308 §3 and §5).
	// Defaults to 5s, the default answer TTL (SPEC §3 dns_ttl): a name
	// that starts to exist — a service defined, an instance registered, a
	// port added — then becomes resolvable as fast as a changed address
	// propagates, which is the point of a service-discovery zone. The cost,
	// resolvers re-asking for absent names every 5 s, is the same one the
	// positive TTL already pays. At most 24h (RFC 2308 §5: "values
	// exceeding one day have been found to be problematic").
	Minimum time.Duration

	// StaticFile is the path of an RFC 1035 master file of static records
	// to serve beside the services: whole-name records such as a TXT at
	// the apex or an A for a legacy host. $ORIGIN defaults to Domain, a
	// record without a TTL and without $TTL gets DefaultStaticTTL, and
	// $INCLUDE is refused (the file must be self-contained, and an
	// include could disclose any file the server can read in its errors).
	// See Zone.Static for the rules the records must follow.
	StaticFile string
	// Static is the same as StaticFile, read from a reader: New reads it
	// to the end (or to the first error) and does not close it. Error
	// messages call it "<static>".
	// Give at most one of StaticFile and Static.
	Static io.Reader
}

// Defaults for Config (see the fields) and limits.
const (
	DefaultDomain  = "cairn.internal."
	DefaultNSTTL   = time.Hour
	DefaultRefresh = time.Hour
	DefaultRetry   = 10 * time.Minute
	DefaultExpire  = 24 * time.Hour
	DefaultMinimum = 5 * time.Second
	// DefaultStaticTTL is the TTL of a static record that gives none,
	// in a file without $TTL. An hour, as static records change only when
	// the operator edits the file and restarts.
	DefaultStaticTTL = time.Hour
	// MaxMinimum is the longest Minimum (RFC 2308 §5).
	MaxMinimum = 24 * time.Hour
	// MaxTTL is the longest TTL and SOA timer: RFC 2181 §8 limits TTLs to
	// 2^31-1 seconds, and the SOA timers are the same kind of number.
	MaxTTL = (1<<31 - 1) * time.Second
)

// staticLabel names Config.Static in errors.
const staticLabel = "<static>"

func (c *Config) setDefaults() {
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.NSTTL == 0 {
		c.NSTTL = DefaultNSTTL
	}
	if c.Refresh == 0 {
		c.Refresh = DefaultRefresh
	}
	if c.Retry == 0 {
		c.Retry = DefaultRetry
	}
	if c.Expire == 0 {
		c.Expire = DefaultExpire
	}
	if c.Minimum == 0 {
		c.Minimum = DefaultMinimum
	}
	// NS, MName and RName depend on the domain and the static records;
	// New fills them in once it has both.
}

// seconds converts a duration field to the whole seconds the wire carries.
func seconds(field string, d, max time.Duration) (uint32, error) {
	switch {
	case d < time.Second:
		return 0, fieldError(field, "%v is less than 1s", d)
	case d%time.Second != 0:
		return 0, fieldError(field, "%v is not a whole number of seconds (DNS counts TTLs and timers in seconds)", d)
	case d > max:
		return 0, fieldError(field, "%v exceeds the maximum of %v", d, max)
	}
	return uint32(d / time.Second), nil
}

// hostName checks a configured host name (Domain, NS, MName, an NSAddrs
// key) and returns it lower-case and fully qualified. Host names are
// stricter than DNS names in general: RFC 1123 labels (letters, digits,
// '-', no '-' at either end), no escapes, and not the root.
func hostName(field, s string) (string, error) {
	if s == "" {
		return "", fieldError(field, "is empty")
	}
	name := strings.ToLower(s)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	if name == "." {
		return "", fieldError(field, "%q is the root; a host name has at least one label", s)
	}
	if len(name)+1 > maxNameOctets { // each dot becomes a length octet; one more for the root
		return "", fieldError(field, "%q is not a valid domain name: it is longer than %d octets", s, maxNameOctets)
	}
	for label := range strings.SplitSeq(name[:len(name)-1], ".") {
		switch {
		case label == "":
			return "", fieldError(field, "%q is not a valid domain name: it has an empty label", s)
		case len(label) > maxLabelOctets:
			return "", fieldError(field, "%q is not a valid domain name: label %q is longer than %d characters", s, label, maxLabelOctets)
		case !dnsname.IsLabel(label):
			return "", fieldError(field, "%q is not a valid host name: label %q may hold only letters, digits and '-', and may not start or end with '-'", s, label)
		}
	}
	return name, nil
}

// mailbox returns RName as a domain name: an address's '@' becomes the
// first label separator and the dots of its local part are escaped
// ("dns.admin@example.com" is dns\.admin.example.com., RFC 1035 §8).
func mailbox(s string) (string, error) {
	const field = "RName"
	name := s
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		local, host := s[:at], s[at+1:]
		if local == "" || strings.ContainsAny(local, "\\ \t\"();@") {
			return "", fieldError(field, "%q is not a valid mailbox: its local part must be non-empty, without spaces or any of \\\"();@", s)
		}
		h, err := hostName(field, host)
		if err != nil {
			return "", fieldError(field, "%q is not a valid mailbox: %q is not a valid host name", s, host)
		}
		name = strings.ReplaceAll(local, ".", `\.`) + "." + h
	}
	canon, ok := canonicalName(name)
	if !ok || canon == "." {
		return "", fieldError(field, "%q is not a valid domain name or mailbox", s)
	}
	return canon, nil
}
