package history

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	held     prometheus.Gauge
	services prometheus.Gauge
	folded   *prometheus.CounterVec
	record   prometheus.Histogram
	// fileErrors counts records dropped for a stalled disk, and failed
	// writes; fileBytes is the file's size.
	fileErrors *prometheus.CounterVec
	fileBytes  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_history_bytes",
			Help: "Memory the history of published tables holds in its steps (bounded by --history-mib)."}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_history_services",
			Help: "Services the history of published tables holds."}),
		folded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_history_steps_let_go_total",
			Help: "Steps of the history let go, by bound: window (older than --history-window, past --history-changes) or memory (past --history-mib)."},
			[]string{"bound"}),
		record: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_history_record_seconds",
			Help:    "Time to record one published table into the history.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8)}),
		fileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_history_file_errors_total",
			Help: "Trouble with the history's file: dropped (records waiting past 16 MiB for a stalled disk; the file is rewritten) or write (a failed write)."},
			[]string{"kind"}),
		fileBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_history_file_bytes",
			Help: "Size of the history's file."}),
	}
	if reg != nil {
		reg.MustRegister(m.held, m.services, m.folded, m.record, m.fileErrors, m.fileBytes)
	}
	return m
}
