// Package zones is the model of cairn's authoritative DNS zone: its apex
// records, its static records, and the rules that say what a query name
// is before anyone looks at the catalog. The DNS server (dnsserver) holds
// one *Zone, built at start-up, and asks it two questions per query.
//
// # The zone
//
// One zone, --domain (default cairn.internal.), with three parts:
//
//   - The apex: an SOA made from Config (the serial is the store's
//     revision, passed in per answer) and an NS RRset, with the A/AAAA
//     records of the name servers that are inside the zone.
//   - The service tree, svc.<domain>, which the catalog owns (SPEC §3);
//     its shapes are below.
//   - Static records from an RFC 1035 master file, anywhere else in the
//     zone: a TXT at the apex, an A for a legacy host, an alias.
//
// The shapes of the service tree, and the Kind Classify gives each:
//
//	svc.<domain>                                 ServiceTree (empty non-terminal)
//	<ns>.svc.<domain>                            Namespace   (empty non-terminal)
//	<svc>.<ns>.svc.<domain>                      Service     A, AAAA
//	_<tcp|udp>.<svc>.<ns>.svc.<domain>           SRVProto    (empty non-terminal)
//	_<port>._<tcp|udp>.<svc>.<ns>.svc.<domain>   SRV         SRV
//	<instance>.<svc>.<ns>.svc.<domain>           Instance    A, AAAA
//
// # Per query
//
// Classify says where the name lies (a Kind) and which labels it names,
// without allocating. The Kind's documentation says what the caller must
// look up in its catalog to choose between an answer, NODATA and NXDOMAIN:
//
//	n := zone.Classify(q.Name)
//	switch n.Kind {
//	case zones.OutsideZone:
//		// REFUSED
//	case zones.Apex, zones.Static:
//		rrs, _ := zone.Static(q.Name, q.Qtype) // apex SOA: zone.SOA(serial)
//		// … an answer, or NODATA with zone.SOA(serial) in the authority
//	case zones.Service:
//		// catalog lookup of (n.Namespace, n.Service), case-insensitively
//	case zones.NotFound:
//		// NXDOMAIN with zone.SOA(serial) in the authority
//	// …
//	}
//
// # Decisions
//
// The tree's own name, svc.<domain>, always exists (NODATA), even before
// any service is defined: answering NXDOMAIN there would let a resolver
// that synthesises negative answers from it (RFC 8020) deny every service
// name for the negative TTL just after the first service is defined.
//
// The static records may not reach into the service tree, nor make the
// zone anything but a flat, unsigned, authoritative zone: no SOA (the zone
// makes its own), no NS below the apex (a delegation would need referral
// logic that an authoritative-only server has no use for), no DNAME, no
// wildcards, no DNSSEC records, class IN only, and the alias rules of RFC
// 1034 §3.6.2 and RFC 2181 §10 (no CNAME at the apex, nothing beside a
// CNAME). New rejects a file that breaks one, naming the file and line,
// rather than serving a zone that differs from what the operator wrote.
//
// Names are compared as the wire delivers them: ASCII case-insensitively,
// as text in miekg/dns presentation format, without decoding escapes.
//
// # What it must not do
//
// Know about services, instances or health (that is the catalog and the
// status table, read by the server), start goroutines, hold global state,
// or read any file other than the static file it is given. miekg/dns types
// appear in its API on purpose: it is one of the three packages allowed to
// use them (STYLE §5), beside the server that writes them to the wire.
package zones
