package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/controllers/observe"
)

// The operator's metrics, served by the manager's metrics endpoint (and
// observe's and redisfleet's).
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
)

func init() {
	registerMetrics(snapshotCompileSeconds, snapshotBytes)
}

func registerMetrics(cs ...prometheus.Collector) { metrics.Registry.MustRegister(cs...) }

// forgetFleetMetrics drops the series of a deleted fleet (its Redis
// series are RedisFleetReconciler's to drop).
func forgetFleetMetrics(fleet types.NamespacedName) {
	l := fleet.Namespace + "/" + fleet.Name
	snapshotCompileSeconds.DeleteLabelValues(l)
	snapshotBytes.DeleteLabelValues(l)
	observe.ForgetFleet(fleet)
}
