package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/controllers/observe"
)

// The operator's metrics, served by the manager's metrics endpoint (and
// observe's, of the pod observers).
var (
	snapshotCompileSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_operator_snapshot_compile_seconds",
		Help:    "Time to compile a fleet's selected policies into a snapshot document and validate it.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
	}, []string{"fleet"})
	snapshotBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_operator_snapshot_bytes",
		Help: "Size of each fleet's last compiled snapshot document.",
	}, []string{"fleet"})
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
	registerMetrics(snapshotCompileSeconds, snapshotBytes, redisDataLoss,
		redisUsedMemory, redisMaxMemory)
}

func registerMetrics(cs ...prometheus.Collector) { metrics.Registry.MustRegister(cs...) }

// forgetFleetMetrics drops the series of a deleted fleet.
func forgetFleetMetrics(fleet types.NamespacedName) {
	l := fleet.Namespace + "/" + fleet.Name
	snapshotCompileSeconds.DeleteLabelValues(l)
	snapshotBytes.DeleteLabelValues(l)
	observe.ForgetFleet(fleet)
	redisUsedMemory.DeletePartialMatch(map[string]string{"fleet": l})
	redisMaxMemory.DeletePartialMatch(map[string]string{"fleet": l})
	redisDataLoss.DeleteLabelValues(l)
}
