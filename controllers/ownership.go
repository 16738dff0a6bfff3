package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

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

// children applies and reads the objects a fleet controls, for one
// controller: what it remembers having applied is that controller's own.
type children struct {
	client client.Client
	scheme *runtime.Scheme
	// reader reads uncached what the cache lacks; nil means client.
	reader client.Reader
	// applied is what this controller last applied to each object.
	applied appliedObjects
}

func newChildren(c client.Client, scheme *runtime.Scheme, reader client.Reader) *children {
	if reader == nil {
		reader = c
	}
	return &children{client: c, scheme: scheme, reader: reader}
}

// readOwned reads the object named like obj into existing, through the
// cache and, when the cache has no such object (it may lack the labels the
// cache selects by), through the API server. It returns false when no
// such object exists, and an objectInTheWayError when one does that the
// fleet does not control.
func (c *children) readOwned(ctx context.Context, fleet *v1beta1.LimiterFleet, obj, existing client.Object) (bool, error) {
	key := client.ObjectKeyFromObject(obj)
	err := c.client.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) {
		err = c.reader.Get(ctx, key, existing)
	}
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	case !metav1.IsControlledBy(existing, fleet):
		e := &objectInTheWayError{namespace: key.Namespace, name: key.Name}
		if gvk, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
			e.kind = gvk.Kind
		}
		if ref := metav1.GetControllerOf(existing); ref != nil {
			e.controller = ref.Kind + " " + ref.Name
		}
		return true, e
	}
	return true, nil
}

// apply server-side applies obj, owned by the fleet. It skips the call
// when this controller applied the same content to the same
// resourceVersion before: nobody changed the object since, so the apply
// would be a no-op that only spends the API server's rate limit.
func (c *children) apply(ctx context.Context, fleet *v1beta1.LimiterFleet, obj client.Object) error {
	if err := controllerutil.SetControllerReference(fleet, obj, c.scheme); err != nil {
		return err
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	key := fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())
	existing := obj.DeepCopyObject().(client.Object)
	found, err := c.readOwned(ctx, fleet, obj, existing)
	if err != nil {
		return err
	}
	if found && c.applied.unchanged(key, existing.GetResourceVersion(), sum) {
		return nil
	}
	if err := c.client.Patch(ctx, obj, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return err
	}
	c.applied.record(key, obj.GetResourceVersion(), sum)
	return nil
}
