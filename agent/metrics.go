package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connected   prometheus.Gauge
	reconnects  prometheus.Counter
	applied     prometheus.Counter
	nacks       prometheus.Counter
	dropped     prometheus.Gauge
	loadErrors  prometheus.Counter
	saveErrors  prometheus.Counter
	saveSeconds prometheus.Histogram
}

// viewCollector reports each view's age and staleness at scrape time.
type viewCollector struct {
	a          *Agent
	age, stale *prometheus.Desc
}

func (c *viewCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.age; ch <- c.stale }

func (c *viewCollector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.a.Status(c.a.staleAfter()).Views {
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, v.AgeSeconds, v.Name)
		stale := 0.0
		if v.Stale {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, stale, v.Name)
	}
}

func newMetrics(reg prometheus.Registerer, a *Agent) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_agent_connected",
			Help: "1 while the agent's xDS stream is open and has answered, else 0."}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_agent_reconnects_total",
			Help: "xDS streams that ended and were opened again (after backoff with full jitter)."}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_agent_responses_applied_total",
			Help: "xDS responses applied to the agent's views."}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_agent_nacks_total",
			Help: "xDS responses the agent refused (a view it cannot read, or older than the one held); it keeps what it holds."}),
		dropped: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_agent_instances_dropped",
			Help: "Instances left out of the agent's table because it is full."}),
		loadErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_agent_file_load_errors_total",
			Help: "Times the views file could not be read at start (it is set aside and the views subscribed to again)."}),
		saveErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_agent_file_save_errors_total",
			Help: "Failed writes of the views file (the agent serves on from memory)."}),
		saveSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_agent_file_save_seconds",
			Help:    "Time to write the views file (write, fsync, rename, fsync of the directory).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}),
	}
	if reg != nil {
		cs := []prometheus.Collector{m.connected, m.reconnects, m.applied, m.nacks, m.dropped, m.loadErrors, m.saveErrors, m.saveSeconds}
		views := &viewCollector{a: a,
			age: prometheus.NewDesc("cairn_agent_view_age_seconds",
				"Time since the view was last known to be the server's current one (0 while the stream is open).", []string{"view"}, nil),
			stale: prometheus.NewDesc("cairn_agent_view_stale",
				"1 when the view is older than the stale threshold, or restored from disk and not refreshed since.", []string{"view"}, nil)}
		if !a.cfg.NoViewMetrics {
			cs = append(cs, views)
		}
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
