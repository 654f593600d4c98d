package history

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	held     prometheus.Gauge
	services prometheus.Gauge
	folded   *prometheus.CounterVec
	record   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_history_changes",
			Help: "Changed entries the history of published tables holds (bounded by --history-entries)."}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_history_services",
			Help: "Services the history of published tables holds."}),
		folded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_history_steps_let_go_total",
			Help: "Steps of the history let go, by bound: window (older than --history-window, past --history-changes) or entries (past --history-entries)."},
			[]string{"bound"}),
		record: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_history_record_seconds",
			Help:    "Time to record one published table into the history.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8)}),
	}
	if reg != nil {
		reg.MustRegister(m.held, m.services, m.folded, m.record)
	}
	return m
}
