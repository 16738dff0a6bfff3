package resources

import (
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A limiter pod that is told to stop (SIGTERM) first fails readiness and
// keeps answering for LimiterDrainDelay, so that the endpoints of every
// gateway drop it before its listeners close; then it finishes the calls
// in flight (the limiter's shutdown timeout, 10s) and gives its local-tier
// grants back to Redis. The pod's grace period covers all three, and a
// PodDisruptionBudget keeps voluntary evictions (node drains) to one pod
// at a time.
const (
	// LimiterDrainDelay is the limiter's --drain-delay in fleets' pods.
	LimiterDrainDelay = limiterwire.DefaultDrainDelay
	// LimiterGracePeriod is the limiter pods' terminationGracePeriodSeconds:
	// the drain delay, the shutdown timeout, and 5s to give grants back and
	// close the store.
	LimiterGracePeriod = LimiterDrainDelay + limiterwire.DefaultShutdownTimeout + 5*time.Second
)

// BuildLimiterPDB builds the limiter pods' PodDisruptionBudget: at most one
// of them evicted at a time. It allows an eviction even with one replica,
// and of pods that are not ready (AlwaysAllow), so that a node drain never
// waits on a fleet that can't get healthy.
func BuildLimiterPDB(fleet *v1beta1.LimiterFleet) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: limiterMeta(fleet, LimiterName(fleet)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable:             ptr.To(intstr.FromInt32(1)),
			Selector:                   &metav1.LabelSelector{MatchLabels: LimiterSelectorLabels(fleet)},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}
