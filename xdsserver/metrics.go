package xdsserver

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	streams   prometheus.Gauge
	opened    prometheus.Counter
	refused   *prometheus.CounterVec // by reason
	responses *prometheus.CounterVec // by type
	nacks     *prometheus.CounterVec // by type
	dropped   prometheus.Gauge
	places    prometheus.Gauge
	refreshes prometheus.Counter
	delivery  *prometheus.HistogramVec // by lane
	deferred  *prometheus.CounterVec   // by reason
	loads     *prometheus.CounterVec   // by result
	stale     prometheus.Gauge
	letGo     *prometheus.CounterVec // by reason
}

// typeLabel is the short name of a type URL in metrics.
var typeLabel = [numTypes]string{"cluster", "endpoint", "listener", "route"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_xds_streams",
			Help: "Open xDS streams."}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_xds_streams_opened_total",
			Help: "xDS streams admitted since the server started: a rise with cairn_xds_streams flat is subscribers reconnecting."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_xds_streams_refused_total",
			Help: "xDS streams refused: with UNAVAILABLE, the status table not loaded yet (not_ready), the admission cap (admission_cap: after a restart, or reconnecting subscribers past 5% of the expected count per 10 s) or a client that holds a view on a stale server (stale); with UNAUTHENTICATED, no token or an unknown one (unauthenticated); with RESOURCE_EXHAUSTED, a client past a cap (streams_per_token, streams_per_address) or a stream that asked for more names or types than one stream may (names_per_stream, types_per_stream: the stream ends)."}, []string{"reason"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_xds_responses_total",
			Help: "xDS responses sent, by resource type."}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_xds_nacks_total",
			Help: "xDS responses a subscriber refused (NACK), by resource type; the refused version is not sent again."}, []string{"type"}),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cairn_xds_delivery_seconds",
			Help:    "From the status table that changed a resource to the subscriber's acknowledgement of it, by lane: withdrawal (an endpoint out of rotation, or a resource removed) or admission (everything else). SPEC §4's budgets: 5 s and 30 s.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"lane"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_xds_admissions_deferred_total",
			Help: "Times a stream held back admissions (endpoints added, weights changed) while withdrawals went on: to coalesce them (coalesce) or because the server's admission budget was spent (shed)."}, []string{"reason"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_xds_load_stats_total",
			Help: "Load statistics subscribers reported over LRS, by what became of them: taken as outcomes of one endpoint (endpoint), of a locality's only endpoint in rotation (locality); not attributable to one instance (unattributed); of a cluster the server does not serve or the caller may not read (unknown_cluster); reports the leader could not be handed (not_forwarded)."}, []string{"result"}),
		refreshes: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_xds_table_refreshes_total",
			Help: "Status tables the xDS hub followed (with no stream it follows them without building anything)."}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_xds_stale",
			Help: "1 while the server's store view is stale (past --stale-after without quorum, or restored from disk): it lets its xDS subscribers go."}),
		letGo: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_xds_streams_let_go_total",
			Help: "xDS streams the server ended with UNAVAILABLE so that their clients reconnect: the server turned stale (stale), or a stream served stale while the server is fresh again (fresh_again)."}, []string{"reason"}),
		places: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_xds_places",
			Help: "Places the xDS server builds assignments for at each table change: the cluster's localities its subscribers are in (a declared locality no instance is in counts as its region, or as none), never more than its (region, zone) pairs and regions, plus one."}),
		dropped: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_xds_duplicate_endpoints",
			Help: "Endpoints left out of the latest assignments because another instance of their service has their address and port."}),
	}
	// Both reasons from the start, at 0: a rare event's series is there
	// to alert on before it first happens.
	m.letGo.WithLabelValues("stale")
	m.letGo.WithLabelValues("fresh_again")
	for _, r := range []string{"streams_per_token", "streams_per_address", "names_per_stream", "types_per_stream"} {
		m.refused.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.streams, m.opened, m.refused, m.responses, m.nacks, m.dropped, m.refreshes, m.places, m.delivery, m.deferred, m.loads, m.stale, m.letGo} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
