// Package dnsserver is cairn's authoritative DNS server (SPEC §3): it
// answers, over UDP and TCP on one port, for the one zone package zones
// describes, and cross-references every query with the status table this
// node last published (package status).
//
// # What it answers
//
//   - A or AAAA at a service name: eligible endpoints of the asked family,
//     nearest topology tier first, sampled by weight, at most the
//     service's a_record_limit (select.go says how).
//   - SRV at _port._proto.<service>: every eligible endpoint, priority =
//     tier, weight = published weight, the targets' addresses in the
//     additional section while they fit.
//   - A or AAAA at an instance name: its addresses while it is registered
//     and not terminated, whatever its health.
//   - The apex SOA and NS (with glue), static records from the zone file,
//     and ANY minimally: one synthesised HINFO (RFC 8482).
//   - NXDOMAIN or NODATA, with the zone's SOA in the authority section at
//     the negative TTL (RFC 2308): zones.Classify and the table's
//     directory decide which.
//
// When the node's view of the store is older than Config.StaleAfter, or
// its table was restored from disk, answers are stale: EDE 3 (19 for
// NXDOMAIN), TTLs at most 30 s (RFC 8767). An answer that serves
// endpoints with health disregarded carries EDE 0.
//
// # What it refuses
//
//   - REFUSED, AA clear, with EDE 20, outside the zone (no referral);
//     REFUSED for AXFR and IXFR, and for classes other than IN and ANY.
//   - FORMERR for a query without exactly one question, with answer or
//     authority records, with two OPTs, or asking for a meta type (OPT,
//     TSIG, TKEY, MAILA, MAILB); NOTIMP, echoing only the opcode, for
//     opcodes other than QUERY (RFC 8906); BADVERS for EDNS versions
//     above 0.
//   - SERVFAIL, AA clear, before the first table is published (EDE 14)
//     and past Config.MaxStale (EDE 22).
//   - Nothing at all to a response (QR set).
//
// # What it will not be made to do
//
// On a listener that is not loopback (Config.RRL.Mode and
// Config.Cookies.Mode: auto, on, off), UDP answers are rate-limited per
// source prefix (rrl.go: 2,000 a second per /24 or /56, burst 4,000;
// past that one in two is sent truncated, TC and the question only, and
// the others dropped), so that a spoofed query cannot aim the server at a
// victim; and EDNS cookies are answered (cookie.go: RFC 7873, with RFC
// 9018 server cookies a shared secret makes and checks on every replica).
// A query whose server cookie verifies has proven its address and is
// never limited; TCP never is. A malformed COOKIE option is FORMERR;
// BADCOOKIE is never sent.
//
// # Where each job lives
//
//	server.go   Server and New; Listen binds UDP and TCP on one port;
//	            Run serves until its context is done, then shuts both down
//	config.go   Config, its defaults and their validation
//	udp.go      the UDP loop: batched reads and writes, the allocation-free
//	            parser of the common query (parseQuery)
//	udpio_linux.go  recvmmsg and sendmmsg through the socket's RawConn,
//	            senders kept in the kernel's form (udpio_other.go: one
//	            datagram a call elsewhere)
//	pktinfo_linux.go  answers sent from the address that was asked: the
//	            packet info control messages, read and built by hand
//	tcpcap.go   the cap on open TCP connections (TCP is miekg/dns's server)
//	request.go  ServeDNS (TCP) and requestOf turn a query miekg/dns parsed
//	            into a request; the client subnet option (ecs) and the
//	            caller's place (locality)
//	answer.go   answer, the path every query takes from request to rcode:
//	            FORMERR, NOTIMP, BADVERS, REFUSED, serve-stale, SERVFAIL,
//	            the name classified by the zone; then resolve, the apex
//	            and static records, ANY, and negatives with their SOA
//	service.go  answers from the status table: A/AAAA at a service, SRV,
//	            A/AAAA at an instance
//	select.go   choosing endpoints: tiers, spill, the guard, weighted
//	            sampling without replacement
//	wire.go     the answer written in wire format into a pooled buffer,
//	            the OPT record and its EDEs, truncation
//	rrl.go      response-rate limiting: a fixed table of GCRA cells, one
//	            per source prefix, and the verdict (pass, slip, drop) on
//	            each UDP answer
//	cookie.go   EDNS cookies: checking a query's, making or echoing the
//	            server cookie (siphash.go: SipHash-2-4)
//	metrics.go  the cairn_dns_* metrics
//
// Both transports answer with the same code: a request (parseQuery on the
// UDP fast path, requestOf otherwise) goes to answer, which writes the
// whole response into the caller's buffer. The path allocates nothing for
// A, AAAA, SRV and negative answers, socket to socket (alloc_test.go); the
// figures in BENCHMARKS.md measure it.
//
// # What it reads
//
// Its Config and nothing else: the zone (immutable once built), the
// status.Publisher whose published table each query acquires and
// releases without locking, and the plain functions the caller passes
// for serve-stale (LastSync, Restored) and time (Now). It never imports
// the store, the health loop or the evaluator (cmd/deps_test.go enforces
// this): what they conclude reaches it only through the published table.
// It holds no global state, and starts goroutines only in Run, which
// waits for them before it returns.
//
// The package has no README of its own: its flags are in docs/cli.md,
// what they do and its metric names in docs/operating.md, and the
// reasons behind its RFC choices in docs/decisions.md ("DNS server",
// "Serving path fit for real networks", "The DNS tail on one core", "DNS
// response-rate limiting and cookies").
package dnsserver
