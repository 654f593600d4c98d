package dnsserver

import (
	"strconv"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	queries     *prometheus.CounterVec
	latency     prometheus.Histogram
	stale       *prometheus.CounterVec
	disregarded prometheus.Counter
	dropped     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_dns_queries_total",
			Help: "DNS queries answered, by query type and rcode."}, []string{"type", "rcode"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_dns_query_duration_seconds",
			Help:    "Time to build and send one DNS answer.",
			Buckets: prometheus.ExponentialBuckets(0.000005, 3, 10)}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_dns_stale_answers_total",
			Help: "Answers given from a stale store view (stale) or refused past max-stale (servfail)."}, []string{"kind"}),
		disregarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_health_disregarded_answers_total",
			Help: "Answers served with health disregarded (EDE 0 health-disregarded)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_dns_dropped_total",
			Help: "Queries dropped without an answer."}),
	}
	if reg != nil {
		reg.MustRegister(m.queries, m.latency, m.stale, m.disregarded, m.dropped)
	}
	return m
}

// typeLabel keeps the label set small: the types cairn answers by name,
// the rest as "other".
func typeLabel(t uint16) string {
	switch t {
	case dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeSOA, dns.TypeNS, dns.TypeANY, dns.TypeTXT, dns.TypeCNAME:
		return dns.TypeToString[t]
	case 0:
		return "none"
	}
	return "other"
}

func rcodeLabel(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return strconv.Itoa(rc)
}

func (m *metrics) observe(qtype uint16, rcode int, d time.Duration) {
	m.queries.WithLabelValues(typeLabel(qtype), rcodeLabel(rcode)).Inc()
	m.latency.Observe(d.Seconds())
}
