package health

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	evaluations     prometheus.Counter
	evalSeconds     prometheus.Histogram
	buildSeconds    prometheus.Histogram
	commits         prometheus.Counter
	commitErrors    prometheus.Counter
	transitions     *prometheus.CounterVec
	discarded       *prometheus.CounterVec
	pushes          *prometheus.CounterVec
	disregarded     prometheus.Gauge
	targets         prometheus.Gauge
	liveMembers     prometheus.Gauge
	unslotted       prometheus.Counter
	setAside        prometheus.Gauge
	buildFailures   prometheus.Counter
	fastWithdrawals prometheus.Counter
	withdrawSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_evaluations_total",
			Help: "Evaluation rounds run by this node as leader."}),
		evalSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_health_evaluation_seconds",
			Help: "Time one evaluation round of every service took.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_health_table_build_seconds",
			Help: "Time one status table rebuild took.", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_commits_total",
			Help: "Batches of verdicts committed to the store."}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_commit_errors_total",
			Help: "Batches of verdicts that failed to commit."}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_health_transitions_total",
			Help: "Eligibility and verdict transitions committed, by the eligibility they led to."}, []string{"to"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_health_evidence_discarded_total",
			Help: "Evidence discarded, by reason (unassigned observer, endpoint never served, stale incarnation, …)."}, []string{"reason"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_health_probe_pushes_total",
			Help: "Probe batches a follower sent to the leader, by result."}, []string{"result"}),
		disregarded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_health_disregarded_services",
			Help: "Services below their minimum healthy fraction, served with health disregarded."}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_health_probe_targets",
			Help: "Probe targets assigned to this node."}),
		liveMembers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_health_live_members",
			Help: "Members the leader counts as live for probe assignment."}),
		unslotted: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_unslotted_total",
			Help: "Instances left out of a full status table."}),
		buildFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_table_build_failures_total",
			Help: "Status table rebuilds that failed: readers keep the last table, stale once it is older than stale-after."}),
		fastWithdrawals: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_withdrawals_published_total",
			Help: "Instances taken out of the table as soon as their withdrawal was applied, before the next build."}),
		withdrawSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_health_withdrawal_publish_seconds",
			Help: "Time one publication of applied withdrawals took.", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
		setAside: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_health_probes_set_aside",
			Help: "Pairs of (prober, zone) whose timeouts are set aside: the prober reaches too little of the zone."}),
	}
	if reg != nil {
		reg.MustRegister(m.evaluations, m.evalSeconds, m.buildSeconds, m.commits, m.commitErrors, m.transitions,
			m.discarded, m.pushes, m.disregarded, m.targets, m.liveMembers, m.unslotted, m.setAside, m.buildFailures, m.fastWithdrawals, m.withdrawSeconds)
	}
	return m
}
