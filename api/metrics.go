package api

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests  *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	forwarded prometheus.Counter
	unaudited prometheus.Counter
	// listBuilds counts the services list built (serviceList): at most
	// once per store revision and status table, whatever the readers.
	listBuilds prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "api", Name: "requests_total",
			Help: "API requests by route and status code.",
		}, []string{"route", "code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "api", Name: "rejected_mutations_total",
			Help: "Write requests refused, by reason (the error code).",
		}, []string{"reason"}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "api", Name: "forwarded_writes_total",
			Help: "Writes, and consistent reads, this follower forwarded to the leader.",
		}),
		unaudited: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "api", Name: "unaudited_refusals_total",
			Help: "Refusals logged but not written to the audit trail (rate limit or no leader).",
		}),
		listBuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "api", Name: "service_list_builds_total",
			Help: "Times the services list (GET /v1/services) was counted and encoded: once per store revision and status table that a request asked for, at most four times a second.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.rejected, m.forwarded, m.unaudited, m.listBuilds)
	}
	return m
}
