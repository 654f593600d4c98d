package health

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	evaluations  prometheus.Counter
	evalSeconds  prometheus.Histogram
	commits      prometheus.Counter
	commitErrors prometheus.Counter
	transitions  *prometheus.CounterVec
	discarded    *prometheus.CounterVec
	pushes       *prometheus.CounterVec
	disregarded  prometheus.Gauge
	targets      prometheus.Gauge
	liveMembers  prometheus.Gauge
	setAside     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_health_evaluations_total",
			Help: "Evaluation rounds run by this node as leader."}),
		evalSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_health_evaluation_seconds",
			Help: "Time one evaluation round of every service took.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
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
			Help: "Services below their minimum healthy fraction, served with health disregarded; set by the leader, 0 on the other servers."}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_health_probe_targets",
			Help: "Probe targets assigned to this node."}),
		liveMembers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_health_live_members",
			Help: "Members the leader counts as live for probe assignment; 0 on the other servers."}),
		setAside: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_health_probes_set_aside",
			Help: "Pairs of (prober, zone) whose timeouts are set aside: the prober reaches too little of the zone; set by the leader, 0 on the other servers."}),
	}
	if reg != nil {
		reg.MustRegister(m.evaluations, m.evalSeconds, m.commits, m.commitErrors, m.transitions,
			m.discarded, m.pushes, m.disregarded, m.targets, m.liveMembers, m.setAside)
	}
	return m
}
