package dnsserver

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	queries *prometheus.CounterVec
	// byTypeRcode caches queries' counters by type label and rcode, so
	// that a query does not hash its labels.
	byTypeRcode [len(typeLabels)][24]atomic.Pointer[prometheus.Counter]
	latency     prometheus.Histogram
	stale       *prometheus.CounterVec
	// staleAnswers and staleServfail are stale's two series, resolved once.
	staleAnswers, staleServfail prometheus.Counter
	disregarded                 prometheus.Counter
	dropped                     prometheus.Counter
	readErrors                  prometheus.Counter
	sendErrors                  prometheus.Counter
	tcpRejected                 prometheus.Counter
	tcpFDWaits                  prometheus.Counter
	rrlSlipped, rrlDropped      prometheus.Counter
	rrlEnabled, cookiesEnabled  prometheus.Gauge
	cookieVec                   *prometheus.CounterVec
	// cookies are cookieVec's series by verdict, resolved once (the
	// unchecked verdict's is never counted).
	cookies [cookieRenew + 1]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_dns_queries_total",
			Help: "DNS queries answered, by query type and rcode."}, []string{"type", "rcode"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_dns_query_duration_seconds",
			Help:    "Time to build one DNS answer (and, over TCP, send it).",
			Buckets: prometheus.ExponentialBuckets(0.000005, 3, 10)}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_dns_stale_answers_total",
			Help: "Answers given from a stale store view (stale) or refused past max-stale (servfail)."}, []string{"kind"}),
		disregarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_health_disregarded_answers_total",
			Help: "Answers served with health disregarded (EDE 0 health-disregarded)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_dropped_total",
			Help: "UDP datagrams dropped without an answer: no DNS header, or a response."}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_udp_read_errors_total",
			Help: "Errors reading UDP queries (the reader goes on)."}),
		sendErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_udp_send_errors_total",
			Help: "UDP answers that could not be sent (the others of the batch still are)."}),
		tcpRejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_tcp_rejected_total",
			Help: "TCP connections closed on accept: the cap on open connections was reached."}),
		tcpFDWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_tcp_accept_fd_waits_total",
			Help: "Back-offs of the TCP accept loop for lack of file descriptors."}),
		rrlSlipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_rrl_slipped_total",
			Help: "UDP answers response-rate limiting sent truncated (TC, the question only) instead."}),
		rrlDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_rrl_dropped_total",
			Help: "UDP answers response-rate limiting did not send."}),
		rrlEnabled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_dns_rrl_enabled",
			Help: "1 when UDP answers are rate-limited per source prefix."}),
		cookiesEnabled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_dns_cookies_enabled",
			Help: "1 when EDNS cookies are answered."}),
		cookieVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_dns_cookies_total",
			Help: "Queries with an EDNS cookie, by what it was: client_only, valid (its server cookie verified), invalid (it did not: a fresh one was sent), malformed (FORMERR)."},
			[]string{"result"}),
	}
	m.staleAnswers, m.staleServfail = m.stale.WithLabelValues("stale"), m.stale.WithLabelValues("servfail")
	m.cookies[cookieMalformed] = m.cookieVec.WithLabelValues("malformed")
	m.cookies[cookieClientOnly] = m.cookieVec.WithLabelValues("client_only")
	m.cookies[cookieInvalid] = m.cookieVec.WithLabelValues("invalid")
	m.cookies[cookieValid] = m.cookieVec.WithLabelValues("valid")
	m.cookies[cookieRenew] = m.cookies[cookieValid]
	if reg != nil {
		reg.MustRegister(m.queries, m.latency, m.stale, m.disregarded, m.dropped, m.readErrors, m.sendErrors,
			m.tcpRejected, m.tcpFDWaits, m.rrlSlipped, m.rrlDropped, m.rrlEnabled, m.cookiesEnabled, m.cookieVec)
	}
	return m
}

// typeLabels keep the label set small: the types cairn answers by name,
// "none" for queries without a question, the rest as "other".
var typeLabels = [...]string{"A", "AAAA", "SRV", "SOA", "NS", "ANY", "TXT", "CNAME", "none", "other"}

func typeIndex(t uint16) int {
	switch t {
	case dns.TypeA:
		return 0
	case dns.TypeAAAA:
		return 1
	case dns.TypeSRV:
		return 2
	case dns.TypeSOA:
		return 3
	case dns.TypeNS:
		return 4
	case dns.TypeANY:
		return 5
	case dns.TypeTXT:
		return 6
	case dns.TypeCNAME:
		return 7
	case 0:
		return 8
	}
	return 9
}

func rcodeLabel(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return strconv.Itoa(rc)
}

func (m *metrics) observe(qtype uint16, rcode int, d time.Duration) {
	ti := typeIndex(qtype)
	if rcode >= 0 && rcode < len(m.byTypeRcode[ti]) {
		slot := &m.byTypeRcode[ti][rcode]
		c := slot.Load()
		if c == nil {
			cc := m.queries.WithLabelValues(typeLabels[ti], rcodeLabel(rcode))
			slot.CompareAndSwap(nil, &cc)
			c = slot.Load()
		}
		(*c).Inc()
	} else {
		m.queries.WithLabelValues(typeLabels[ti], rcodeLabel(rcode)).Inc()
	}
	m.latency.Observe(d.Seconds())
}
