package store

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	applyDuration prometheus.Histogram
	registrations prometheus.Counter
	renewals      prometheus.Counter
	transitions   prometheus.Counter
	hardExpiries  prometheus.Counter
	expiriesHeld  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, s *Store) *metrics {
	m := &metrics{
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "cairn", Subsystem: "store", Name: "apply_duration_seconds",
			Help:    "Time from proposing a write to raft until it is committed and applied on the leader.",
			Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "store", Name: "registrations_total",
			Help: "Registrations that created a new incarnation (identical retries excluded).",
		}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "store", Name: "lease_renewals_total",
			Help: "Lease renewals accepted by this node as leader.",
		}),
		transitions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "store", Name: "leadership_transitions_total",
			Help: "Times this node gained or lost leadership.",
		}),
		hardExpiries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "store", Name: "hard_expiries_total",
			Help: "Registrations this node's replica ended because their lease was past its hard expiry (5 × lease_ttl).",
		}),
		expiriesHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cairn", Subsystem: "store", Name: "hard_expiries_held",
			Help: "Registrations past their hard expiry that this leader holds back by their service's shrink cap, at its last housekeeping tick.",
		}),
	}
	if reg == nil {
		return m
	}
	states := []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}
	for _, state := range []string{"evacuated", "returning", "paused"} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "cairn", Subsystem: "store", Name: "evacuations",
			Help:        "Evacuations in force in this node's replica, by state: evacuated, returning (its zone coming back) or paused (its return held while the zone's instances fail).",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 {
			s.fsm.mu.RLock()
			defer s.fsm.mu.RUnlock()
			n := 0
			for _, e := range s.fsm.evacs {
				if e.State() == state {
					n++
				}
			}
			return float64(n)
		}))
	}
	for _, st := range states {
		st := st
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "cairn", Subsystem: "store", Name: "raft_state",
			Help:        "1 for the raft state this node is in, 0 for the others.",
			ConstLabels: prometheus.Labels{"state": st.String()},
		}, func() float64 {
			if s.raft != nil && s.raft.State() == st {
				return 1
			}
			return 0
		}))
	}
	reg.MustRegister(m.applyDuration, m.registrations, m.renewals, m.transitions, m.hardExpiries, m.expiriesHeld,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "cairn", Subsystem: "store", Name: "revision",
			Help: "Raft index of the last entry applied to this node's replica.",
		}, func() float64 { return float64(s.Revision()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "cairn", Subsystem: "store", Name: "last_contact_age_seconds",
			Help: "Seconds since this node's replica was last known current: since it last heard from a leader or, if older, since it last caught up with the revision the leader told it (0 on the leader).",
		}, func() float64 {
			if s.raft == nil {
				return 0
			}
			lc := s.LastContact()
			if lc.IsZero() {
				return -1
			}
			return s.cfg.Now().Sub(lc).Seconds()
		}),
	)
	return m
}
