package localtier

import "github.com/prometheus/client_golang/prometheus"

var (
	boundDesc = prometheus.NewDesc("sluice_local_tier_overshoot_bound",
		"Two-tier mode: the most units the fleet may admit above the exact algorithm over any interval, by policy (0 for window algorithms; maxOvershoot, or pods × the per-pod cap).",
		[]string{"policy"}, nil)
	podsDesc = prometheus.NewDesc("sluice_local_tier_pods",
		"Two-tier mode: the most pods seen holding grants on one of the policy's keys lately.",
		[]string{"policy"}, nil)
	decisionsDesc = prometheus.NewDesc("sluice_local_tier_decisions_total",
		"Two-tier mode decisions by path: local (spent a granted unit, no store call), grant (one store call), cached_denial (the over-limit cache), exact (passed through: peeks, idempotency keys, the memory store).",
		[]string{"policy", "path"}, nil)
	unitsDesc = prometheus.NewDesc("sluice_local_tier_units_total",
		"Two-tier mode units granted beyond requests' own cost, and credited back unspent.",
		[]string{"policy", "kind"}, nil)
)

// collector exports the installed policies' two-tier figures.
type collector struct{ t *Tier }

// NewCollector returns a Prometheus collector of t's figures.
func NewCollector(t *Tier) prometheus.Collector { return collector{t} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- boundDesc
	ch <- podsDesc
	ch <- decisionsDesc
	ch <- unitsDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.t.Stats() {
		ch <- prometheus.MustNewConstMetric(boundDesc, prometheus.GaugeValue, float64(s.OvershootBound), s.ID)
		ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(s.Pods), s.ID)
		for path, n := range map[string]int64{"local": s.Local, "grant": s.Grants, "cached_denial": s.CachedDenials, "exact": s.Exact} {
			ch <- prometheus.MustNewConstMetric(decisionsDesc, prometheus.CounterValue, float64(n), s.ID, path)
		}
		ch <- prometheus.MustNewConstMetric(unitsDesc, prometheus.CounterValue, float64(s.Granted), s.ID, "granted")
		ch <- prometheus.MustNewConstMetric(unitsDesc, prometheus.CounterValue, float64(s.Credited), s.ID, "credited")
	}
}
