package redisfleet

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The Redis Cluster's metrics, served by the manager's metrics endpoint.
var (
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

func init() { metrics.Registry.MustRegister(Metrics()...) }

// Metrics are the Redis Cluster's metrics, which init registers with
// controller-runtime's registry.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{redisDataLoss, redisUsedMemory, redisMaxMemory}
}

// ForgetFleet drops the series of a deleted fleet.
func ForgetFleet(fleet types.NamespacedName) {
	l := fleet.Namespace + "/" + fleet.Name
	redisUsedMemory.DeletePartialMatch(map[string]string{"fleet": l})
	redisMaxMemory.DeletePartialMatch(map[string]string{"fleet": l})
	redisDataLoss.DeleteLabelValues(l)
}
