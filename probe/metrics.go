package probe

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Labels of cairn_probe_probes_total's result.
const (
	resultOK   = "ok"
	resultFail = "fail"
	resultHard = "hard"
)

// Reasons a due probe is skipped (cairn_probe_skipped_total's reason).
const (
	skipBusy     = "busy"      // every worker was busy
	skipInFlight = "in_flight" // the target's previous probe had not finished
)

type metrics struct {
	probes   map[Kind]map[string]prometheus.Counter // kind → result
	duration map[Kind]prometheus.Observer
	skipped  map[string]prometheus.Counter
	dropped  prometheus.Counter
	targets  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	probes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cairn", Subsystem: "probe", Name: "probes_total",
		Help: "Checks completed, by kind (tcp, http, grpc) and result (ok, fail, hard: connection refused).",
	}, []string{"kind", "result"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cairn", Subsystem: "probe", Name: "duration_seconds",
		Help:    "Time one check took, dial included, by kind.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"kind"})
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cairn", Subsystem: "probe", Name: "skipped_total",
		Help: "Probes not run when due, by reason: busy (every worker was busy) or in_flight (the target's previous probe had not finished).",
	}, []string{"reason"})
	m := &metrics{
		probes:   map[Kind]map[string]prometheus.Counter{},
		duration: map[Kind]prometheus.Observer{},
		skipped: map[string]prometheus.Counter{
			skipBusy:     skipped.WithLabelValues(skipBusy),
			skipInFlight: skipped.WithLabelValues(skipInFlight),
		},
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "probe", Name: "batches_dropped_total",
			Help: "Result batches replaced unread by a newer one because the consumer was slow.",
		}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cairn", Subsystem: "probe", Name: "targets",
			Help: "Targets this node is probing.",
		}),
	}
	// Every label combination exists from the start, at zero, so that
	// rate() and alerts see the first increment.
	for _, k := range []Kind{TCP, HTTP, GRPC} {
		m.probes[k] = map[string]prometheus.Counter{}
		for _, r := range []string{resultOK, resultFail, resultHard} {
			m.probes[k][r] = probes.WithLabelValues(k.String(), r)
		}
		m.duration[k] = duration.WithLabelValues(k.String())
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{probes, duration, skipped, m.dropped, m.targets} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("probe: registering metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts one finished check of kind k.
func (m *metrics) observe(k Kind, o Outcome) {
	r := resultFail
	switch {
	case o.OK:
		r = resultOK
	case o.Hard:
		r = resultHard
	}
	if c, ok := m.probes[k][r]; ok {
		c.Inc()
		m.duration[k].Observe(o.Latency.Seconds())
	}
}
