package certs

import "github.com/prometheus/client_golang/prometheus"

// metrics registers the package's metrics: they describe the set in use
// only, never one replaced (field notes T4).
func (f *Files) metrics(reg prometheus.Registerer) {
	f.notAfter = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cairn_tls_not_after_timestamp_seconds",
		Help: "When the certificate in use (kind=cert) and the earliest CA trusted (kind=ca) expire, in Unix seconds: alert at two thirds of the certificate's lifetime."},
		[]string{"kind"})
	f.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_tls_reloads_total",
		Help: "Certificate reloads: result=ok loaded changed files, result=error kept the previous ones."}, []string{"result"})
	f.reloadFailed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_tls_reload_failing",
		Help: "1 while the certificate files on disk cannot be loaded (the previous ones are in use), else 0."})
	f.reloads.WithLabelValues("ok")
	f.reloads.WithLabelValues("error")
	if reg != nil {
		reg.MustRegister(f.notAfter, f.reloads, f.reloadFailed)
	}
	f.setExpiry(f.cur.Load())
}

func (f *Files) setExpiry(s *set) {
	if s.leaf != nil {
		f.notAfter.WithLabelValues("cert").Set(float64(s.leaf.NotAfter.Unix()))
	}
	f.notAfter.WithLabelValues("ca").Set(float64(earliestCA(s).Unix()))
}

func (f *Files) count(result string) { f.reloads.WithLabelValues(result).Inc() }
