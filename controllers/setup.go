package controllers

import (
	"context"
	"net/http"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configure the operator's controllers.
type Options struct {
	// LimiterImage is the image of fleets that name none.
	LimiterImage string
	// AckClient, when set, makes the calls to limiter pods' admin endpoint.
	AckClient *http.Client
}

// Leader election and events.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Setup adds the acknowledgement tracker and both controllers to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	acks := NewAckTracker()
	acks.Client = opts.AckClient
	if err := mgr.Add(acks); err != nil {
		return err
	}
	if err := (&LimiterFleetReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Acks: acks, DefaultImage: opts.LimiterImage}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&RateLimitPolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Acks: acks}).SetupWithManager(ctx, mgr)
}
