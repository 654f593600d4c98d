package publish

import "github.com/prometheus/client_golang/prometheus"

// metrics keeps the names the health loop gave them when it built the
// table: dashboards and alerts know them by those.
type metrics struct {
	buildSeconds    prometheus.Histogram
	unslotted       prometheus.Counter
	peerShadowed    prometheus.Gauge
	buildFailures   prometheus.Counter
	fastWithdrawals prometheus.Counter
	withdrawSeconds prometheus.Histogram
	// emptyingRebuilds counts withdrawals published by a rebuild rather
	// than a copy (withdraw.go).
	emptyingRebuilds prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_health_table_build_seconds",
			Help: "Time one status table rebuild took.", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
		peerShadowed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_peer_instances_shadowed",
			Help: "Other regions' instances left out of the table because an instance of this region has the same id in the service (an instance's name is its id: keep ids unique across regions)."}),
		unslotted: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_unslotted_total",
			Help: "Instances left out of a full status table."}),
		buildFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_table_build_failures_total",
			Help: "Status table rebuilds that failed: readers keep the last table, stale once it is older than stale-after."}),
		fastWithdrawals: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_withdrawals_published_total",
			Help: "Instances taken out of the table as soon as their withdrawal was applied, before the next build."}),
		withdrawSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_health_withdrawal_publish_seconds",
			Help: "Time one publication of applied withdrawals took.", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
		emptyingRebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_withdrawal_rebuilds_total",
			Help: "Withdrawals published by a rebuild from the replica rather than a copy of the table: the copy would have left a service with nothing in rotation while the replica may hold its admissions."}),
	}
	if reg != nil {
		reg.MustRegister(m.buildSeconds, m.unslotted, m.peerShadowed, m.buildFailures, m.fastWithdrawals, m.withdrawSeconds, m.emptyingRebuilds)
	}
	return m
}
