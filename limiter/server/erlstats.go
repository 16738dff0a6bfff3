package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/service"
)

// ERLStats exports the service's hit statistics (service.EachHitStats:
// those of the policies with HitStats, the limits read from
// envoyproxy/ratelimit configuration) as ERL's per-limit statistics,
// ratelimit.service.rate_limit.KEY.STAT in ERL's statsd:
// sluice_erl_hits_total{domain, key, stat}, KEY the limit's stats key
// and STAT one of total_hits, over_limit, near_limit, within_limit and
// shadow_mode (a shadow_mode limit's hits over it: HitCounts.DryRun).
// limiter/app registers it.
func ERLStats(svc *service.Service) prometheus.Collector {
	return erlStatsCollector{svc: svc, desc: prometheus.NewDesc("sluice_erl_hits_total",
		"envoyproxy/ratelimit's per-limit statistics for limits read from ERL configuration: hits by domain, ERL's stats key (the limit's full key; with detailed_metric or value_to_metric, the request's values, up to a bound past which hits count under the full key) and stat: total_hits, over_limit, near_limit, within_limit, shadow_mode.",
		[]string{"domain", "key", "stat"}, nil)}
}

type erlStatsCollector struct {
	svc  *service.Service
	desc *prometheus.Desc
}

func (c erlStatsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c erlStatsCollector) Collect(ch chan<- prometheus.Metric) {
	c.svc.EachHitStats(func(domain, key string, n service.HitCounts) {
		for _, s := range [...]struct {
			stat string
			n    uint64
		}{{"total_hits", n.Total}, {"over_limit", n.Over}, {"near_limit", n.Near}, {"within_limit", n.Within}, {"shadow_mode", n.DryRun}} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(s.n), domain, key, s.stat)
		}
	})
}
