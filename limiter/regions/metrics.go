package regions

import "github.com/prometheus/client_golang/prometheus"

// Metrics are a region's collectors: register them with Collectors.
type Metrics struct {
	reachable *prometheus.GaugeVec
	messages  *prometheus.CounterVec
	served    *prometheus.CounterVec
	decisions *prometheus.CounterVec
	units     *prometheus.CounterVec
}

func newMetrics() *Metrics {
	return &Metrics{
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_region_peer_reachable",
			Help: "1 while the peer region answered this region's last grant call, else 0."}, []string{"peer"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_region_grant_calls_total",
			Help: "Grant calls this region sent to peers, by peer and outcome (Reachable, Unreachable, Unauthorized, UnknownRegion, Refused)."}, []string{"peer", "result"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_region_grant_calls_served_total",
			Help: "Grant calls peers sent to this region, by outcome."}, []string{"result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_region_decisions_total",
			Help: "Decisions of Global policies, by path: home (a key homed here, from this region's own grant of its store, or its memory store), grant (a grant of a home elsewhere), remote (a request costing more than a grant, decided at its home elsewhere), advance (a cold key before its first grant), share (the partition share), denied (the home denied the last grant call)."}, []string{"path"}),
		units: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_region_units_total",
			Help: "Units granted to this region by homes elsewhere."}, []string{"kind"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.reachable, m.messages, m.served, m.decisions, m.units}
}
