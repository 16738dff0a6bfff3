package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// Server-side apply creates the binding with create, and updates it with
// patch, of that one name; the API server lets the operator bind no
// ClusterRole but system:auth-delegator (and its own permissions).
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=patch,resourceNames=sluice-limiter-auth-delegator
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames="system:auth-delegator"

// authDelegationReconciler keeps the one ClusterRoleBinding that lets
// every fleet's limiters review their admin plane's callers
// (BuildLimiterAuthDelegation). It is one object for all fleets, so it is
// its own controller, run when a fleet comes or goes, rather than a phase
// of every fleet's pass listing every fleet. The binding is not read back
// (that would cache every ClusterRoleBinding of the cluster): it is
// applied again every resync, which heals an edit or a deletion.
type authDelegationReconciler struct {
	client.Client
}

// authDelegationResync is how often the binding is applied again with no
// fleet coming or going.
const authDelegationResync = 10 * time.Minute

// authDelegationRequest is the controller's only request.
var authDelegationRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: resources.LimiterAuthDelegatorBinding}}

func (r *authDelegationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("limiter-auth-delegation").
		Watches(&v1beta1.LimiterFleet{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{authDelegationRequest}
		}), builder.WithPredicates(fleetComesOrGoes)).
		Complete(r)
}

// fleetComesOrGoes passes a fleet's creation, its deletion, and the
// update that marks it for deletion: what changes the binding's subjects.
var fleetComesOrGoes = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// Reconcile applies the binding of the fleets that exist and are not
// being deleted.
func (r *authDelegationReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	var fleets v1beta1.LimiterFleetList
	if err := r.List(ctx, &fleets); err != nil {
		return ctrl.Result{}, err
	}
	desired := resources.BuildLimiterAuthDelegation(fleets.Items)
	if err := r.Patch(ctx, desired, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying ClusterRoleBinding %s: %w", resources.LimiterAuthDelegatorBinding, err)
	}
	return ctrl.Result{RequeueAfter: authDelegationResync}, nil
}
