package observe

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The metrics of the pod observers, served by the manager's metrics
// endpoint beside the reconcilers'.
var (
	policiesByCondition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_policies",
		Help: "RateLimitPolicies by condition type (Accepted, Enforced, Degraded) and status (True, False, Unknown), as the collector last saw them.",
	}, []string{"condition", "status"})
	fleetConditions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_fleet_condition",
		Help: "1 when the LimiterFleet's condition (Ready, RedisReady, SnapshotSynced, RedisDataLoss, AdminTLSReady) is True, else 0, as the collector last saw it.",
	}, []string{"fleet", "condition"})
	collectorErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_operator_collector_errors_total",
		Help: "Limiter pods whose admin stats could not be read (timeout, error status, garbage), by fleet; their counts are left out.",
	}, []string{"fleet"})
	collectorScrapes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_operator_collector_scrapes_total",
		Help: "Admin stats reads of limiter pods, successful or not.",
	})
	collectorCycleSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_operator_collector_cycle_seconds",
		Help:    "Duration of one collection: reading every ready limiter pod and writing the changed policy statuses.",
		Buckets: prometheus.ExponentialBuckets(0.005, 3, 8),
	})
	enforcementWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_operator_enforcement_status_writes_total",
		Help: "Status patches of RateLimitPolicy status.enforcement (at most one per policy per write interval).",
	})
)

func init() { metrics.Registry.MustRegister(Metrics()...) }

// Metrics are the pod observers' metrics, which init registers with
// controller-runtime's registry.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{policiesByCondition, fleetConditions,
		collectorErrors, collectorScrapes, collectorCycleSeconds, enforcementWrites}
}

// ForgetFleet drops the series of a deleted fleet.
func ForgetFleet(fleet types.NamespacedName) {
	collectorErrors.DeleteLabelValues(fleet.Namespace + "/" + fleet.Name)
}
