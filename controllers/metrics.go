package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's metrics, served by the manager's metrics endpoint.
var (
	policiesByCondition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_policies",
		Help: "RateLimitPolicies by condition type (Accepted, Enforced, Degraded) and status (True, False, Unknown), as the collector last saw them.",
	}, []string{"condition", "status"})
	fleetConditions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_fleet_condition",
		Help: "1 when the LimiterFleet's condition (Ready, RedisReady, SnapshotSynced, RedisDataLoss) is True, else 0, as the collector last saw it.",
	}, []string{"fleet", "condition"})
	snapshotCompileSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_operator_snapshot_compile_seconds",
		Help:    "Time to compile a fleet's selected policies into a snapshot document and validate it.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
	}, []string{"fleet"})
	snapshotBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_snapshot_bytes",
		Help: "Size of each fleet's last compiled snapshot document.",
	}, []string{"fleet"})
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
	redisUsedMemory = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_redis_used_memory_bytes",
		Help: "used_memory of each node of a fleet's Redis Cluster (mode Cluster), as the operator's last pass read it.",
	}, []string{"fleet", "pod"})
	redisMaxMemory = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_redis_maxmemory_bytes",
		Help: "maxmemory of each node of a fleet's Redis Cluster (mode Cluster); no series for an unbounded node.",
	}, []string{"fleet", "pod"})
	redisDataLoss = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_operator_redis_data_loss_total",
		Help: "Passes of the operator that found slots of a fleet's Redis Cluster whose keys are gone (a shard lost with every replica), by fleet.",
	}, []string{"fleet"})
)

func init() {
	registerMetrics(policiesByCondition, fleetConditions, snapshotCompileSeconds, snapshotBytes,
		collectorErrors, collectorScrapes, collectorCycleSeconds, enforcementWrites, redisDataLoss,
		redisUsedMemory, redisMaxMemory)
}

func registerMetrics(cs ...prometheus.Collector) { metrics.Registry.MustRegister(cs...) }

// forgetFleetMetrics drops the series of a deleted fleet.
func forgetFleetMetrics(fleet types.NamespacedName) {
	l := fleet.Namespace + "/" + fleet.Name
	snapshotCompileSeconds.DeleteLabelValues(l)
	snapshotBytes.DeleteLabelValues(l)
	collectorErrors.DeleteLabelValues(l)
	redisUsedMemory.DeletePartialMatch(map[string]string{"fleet": l})
	redisMaxMemory.DeletePartialMatch(map[string]string{"fleet": l})
	redisDataLoss.DeleteLabelValues(l)
}
