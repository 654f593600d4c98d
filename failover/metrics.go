package failover

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	errors prometheus.Counter
}

// signalCollector reports, at scrape time, the failovers the signal
// holds in force.
type signalCollector struct {
	s      *Signal
	active *prometheus.Desc
}

func (c *signalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.active }

func (c *signalCollector) Collect(ch chan<- prometheus.Metric) {
	n := 0
	for _, e := range c.s.Failovers(c.s.cfg.Now()) {
		if e.EndedAt.IsZero() {
			n++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(n))
}

func newMetrics(reg prometheus.Registerer, s *Signal) (*metrics, error) {
	m := &metrics{errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_failover_signal_errors_total",
		Help: "Reads of the out-of-band failover signal that failed or did not parse (the last one read stays in force)."})}
	if reg != nil {
		active := &signalCollector{s: s, active: prometheus.NewDesc("cairn_failover_signal_active",
			"Failovers of this server's region the out-of-band signal holds in force.", nil, nil)}
		for _, c := range []prometheus.Collector{m.errors, active} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
