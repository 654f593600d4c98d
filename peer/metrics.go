package peer

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	snapshots prometheus.Counter
}

// regionCollector reports each region's view at scrape time.
type regionCollector struct {
	p                     *Peers
	age, stale, instances *prometheus.Desc
}

func (c *regionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	ch <- c.stale
	ch <- c.instances
}

func (c *regionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.p.Status() {
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, r.AgeSeconds, r.Region)
		stale := 0.0
		if r.Stale {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, stale, r.Region)
		ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(r.Instances), r.Region)
	}
}

func newMetrics(reg prometheus.Registerer, p *Peers) (*metrics, error) {
	m := &metrics{
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_peer_snapshots_total",
			Help: "Snapshots made of the other regions' instances (one per change of their views or of their staleness)."}),
	}
	if reg != nil {
		regions := &regionCollector{p: p,
			age: prometheus.NewDesc("cairn_peer_view_age_seconds",
				"Time since this node last knew its view of the region to be the region's current one (0 while a stream is open).", []string{"peer_region"}, nil),
			stale: prometheus.NewDesc("cairn_peer_view_stale",
				"1 while the view of the region is older than stale-after (its instances are served, marked stale), else 0.", []string{"peer_region"}, nil),
			instances: prometheus.NewDesc("cairn_peer_instances",
				"Instances of the region this node's table holds from its view.", []string{"peer_region"}, nil)}
		for _, c := range []prometheus.Collector{m.snapshots, regions} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
