package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// The operator reaches no further than it must. Its cache holds, of each
// kind it renders, only the objects labelled as its own (ManagedLabels):
// not every ConfigMap, Secret or Deployment of the cluster. And it never
// takes an object it does not control: when an object it would render
// already exists without the fleet as its controller (a ConfigMap that
// happens to have the snapshot's name, another tool's Service), the fleet
// reports it (Ready=False, ObjectInTheWay, naming it) and leaves it alone,
// checking again every ObjectInTheWayRetry.

// ManagedLabels are the labels every object the operator renders carries
// (LimiterLabels, RedisLabels), and by which its cache selects them.
// EndpointSlices carry them too: the endpoint controller copies a
// Service's labels to its slices.
func ManagedLabels() labels.Set {
	return labels.Set{resources.LabelManagedBy: resources.ManagedBy, resources.LabelPartOf: resources.PartOf}
}

// managedByObject selects, of every kind the operator renders but Pods,
// only the objects labelled as its own. Secrets it does not render
// (store.*.auth's) are read uncached.
func managedByObject() map[client.Object]cache.ByObject {
	managed := cache.ByObject{Label: labels.SelectorFromSet(ManagedLabels())}
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:             managed,
		&corev1.Secret{}:                managed,
		&corev1.Service{}:               managed,
		&corev1.ServiceAccount{}:        managed,
		&appsv1.Deployment{}:            managed,
		&appsv1.StatefulSet{}:           managed,
		&discoveryv1.EndpointSlice{}:    managed,
		&policyv1.PodDisruptionBudget{}: managed,
		&rbacv1.Role{}:                  managed,
		&rbacv1.RoleBinding{}:           managed,
	}
}

// ObjectInTheWayRetry is how often a fleet blocked by an object it does
// not control looks again: the object is not in the cache, so no event
// says when it goes.
const ObjectInTheWayRetry = 30 * time.Second

// objectInTheWayError says that an object the fleet would own exists and
// is not controlled by the fleet.
type objectInTheWayError struct {
	kind, namespace, name string
	controller            string // "Kind name" of its controller, or ""
}

func (e *objectInTheWayError) Error() string {
	owner := "it has no controller"
	if e.controller != "" {
		owner = "its controller is " + e.controller
	}
	return fmt.Sprintf("%s %s/%s is in the way: it exists and this fleet does not control it (%s); "+
		"the operator leaves it alone: delete or rename it and the fleet creates its own", e.kind, e.namespace, e.name, owner)
}

// isObjectInTheWay reports whether err is, or wraps, an objectInTheWayError.
func isObjectInTheWay(err error) bool {
	var e *objectInTheWayError
	return errors.As(err, &e)
}

// readOwned reads the object named like obj into existing, through the
// cache and, when the cache has no such object (it may lack the labels the
// cache selects by), through the API server. It returns false when no
// such object exists, and an objectInTheWayError when one does that the
// fleet does not control.
func (r *LimiterFleetReconciler) readOwned(ctx context.Context, fleet *v1beta1.LimiterFleet, obj, existing client.Object) (bool, error) {
	key := client.ObjectKeyFromObject(obj)
	err := r.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) {
		err = r.secretReader().Get(ctx, key, existing)
	}
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	case !metav1.IsControlledBy(existing, fleet):
		e := &objectInTheWayError{namespace: key.Namespace, name: key.Name}
		if gvk, err := apiutil.GVKForObject(obj, r.Scheme); err == nil {
			e.kind = gvk.Kind
		}
		if ref := metav1.GetControllerOf(existing); ref != nil {
			e.controller = ref.Kind + " " + ref.Name
		}
		return true, e
	}
	return true, nil
}
