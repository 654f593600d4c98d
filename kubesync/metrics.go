package kubesync

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reconciles  *prometheus.CounterVec
	writes      *prometheus.CounterVec
	watchErrors *prometheus.CounterVec
}

// newMetrics registers kube-sync's metrics on reg (nil: none).
func newMetrics(reg prometheus.Registerer, s *Sync) metrics {
	m := metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_kubesync_reconciles_total",
			Help: "Rounds of a service's reconciliation, by result: ok, error (retried with backoff), undefined (selected, not defined in cairn), denied (the token may not write its namespace)."},
			[]string{"result"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_kubesync_writes_total",
			Help: "Writes to cairn, by op (register, report, renew, drain) and result (ok, error, or the API's refusal code: fenced, not_found, ...)."},
			[]string{"op", "result"}),
		watchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_kubesync_watch_errors_total",
			Help: "Lists and watches of the Kubernetes API that failed (refused, cut), by resource; the informer retries them. Rising: kube-sync may miss changes until a list succeeds (RBAC, the API server)."},
			[]string{"resource"}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.reconciles, m.writes, m.watchErrors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_kubesync_synced",
			Help: "1 once the Service and EndpointSlice informers have synced; kube-sync writes nothing before."},
			func() float64 {
				if s.Ready() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_kubesync_queue_depth",
			Help: "Services waiting for a round of reconciliation."},
			func() float64 { return float64(s.queue.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_kubesync_conflicts",
			Help: "Endpoints left alone at the last round of their service: their instance id is held by an instance another registrar registered."},
			func() float64 {
				s.mu.Lock()
				defer s.mu.Unlock()
				n := 0
				for _, c := range s.conflict {
					n += c
				}
				return float64(n)
			}),
		skippedCollector{s})
	return m
}

// skippedCollector reports the endpoints the last round of each service
// skipped, summed by reason.
type skippedCollector struct{ s *Sync }

var skippedDesc = prometheus.NewDesc("cairn_kubesync_skipped_endpoints",
	"Endpoints of the synced slices that are no instance, at the last round of their service, by reason (no_pod, bad_id, bad_zone, no_address, no_port, duplicate, fqdn_address).",
	[]string{"reason"}, nil)

func (c skippedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- skippedDesc }

func (c skippedCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	sum := map[string]int{}
	for _, sk := range c.s.skipped {
		for r, n := range sk {
			sum[r] += n
		}
	}
	c.s.mu.Unlock()
	for r, n := range sum {
		ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.GaugeValue, float64(n), r)
	}
}
