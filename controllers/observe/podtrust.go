package observe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// The operator trusts only its own pods. Anyone who can create a Pod with
// the labels of a fleet's Service selector in the fleet's namespace gets
// it into the Service's EndpointSlices, and whatever answers there would
// be read as a limiter. So:
//
//   - an endpoint counts for a fleet only when its Pod's controller chain,
//     Pod→ReplicaSet→Deployment, leads to the fleet's own Deployment, which
//     the fleet controls (TrustedEndpoints);
//   - a pod's counts, generations and degraded policies are taken only for
//     the policies the fleet serves (AckTracker.Serve);
//   - every answer is read through a 1 MiB limit (readAnswer), redirects
//     are never followed (noRedirects), and what a pod says is bounded
//     before it reaches a status (boundMessage).
//
// Owner references are metadata that whoever creates a Pod may set, so
// the chain proves ownership only where tenants can't create Pods: keep
// fleets in namespaces of their own (the chart's is the release namespace).

// Bounds on what limiter pods answer.
const (
	// maxAnswerBytes bounds every answer read from a limiter pod.
	maxAnswerBytes = 1 << 20
	// maxPodMessage bounds each string a pod reports (an error, a store
	// detail) that the operator copies into a status.
	maxPodMessage = 256
	// maxHotValue is the longest hottest value status accepts
	// (HotDescriptor.value's CRD maxLength).
	maxHotValue = 1024
	// maxDegradedPolicies bounds the degraded policies kept of one answer.
	maxDegradedPolicies = 1024
	// maxFailureMode bounds a degraded policy's failure mode.
	maxFailureMode = 16
)

// errAnswerTooLarge: a pod answered more than maxAnswerBytes.
var errAnswerTooLarge = fmt.Errorf("answer larger than %d bytes", maxAnswerBytes)

// readAnswer decodes one JSON answer of at most maxAnswerBytes from r into
// v. A larger answer is an error, never a truncated decode.
func readAnswer(r io.Reader, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, maxAnswerBytes+1))
	if err != nil {
		return err
	}
	if len(body) > maxAnswerBytes {
		return errAnswerTooLarge
	}
	return json.NewDecoder(bytes.NewReader(body)).Decode(v)
}

// noRedirects returns a copy of c (nil: a plain client) that never follows
// a redirect: a 3xx answer is returned as it is, which the callers refuse
// as not 200.
func noRedirects(c *http.Client) *http.Client {
	out := &http.Client{}
	if c != nil {
		*out = *c
	}
	out.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return out
}

// boundMessage cuts s to at most n bytes on a rune boundary, marking the
// cut, and drops invalid UTF-8.
func boundMessage(s string, n int) string {
	s = strings.ToValidUTF8(s, "")
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// checkEndpoint reads the Pod and ReplicaSet behind one endpoint and says
// why they are not the fleet's, or "" when they are.
func checkEndpoint(ctx context.Context, r client.Reader, fleet *v1beta1.LimiterFleet, dep *appsv1.Deployment,
	host string, ref *corev1.ObjectReference) (string, error) {
	if ref == nil || ref.Kind != "Pod" || (ref.Namespace != "" && ref.Namespace != fleet.Namespace) {
		return "the endpoint names no Pod of the fleet's namespace", nil
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: ref.Name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return "Pod " + ref.Name + " not found", nil
		}
		return "", err
	}
	var rs *appsv1.ReplicaSet
	if c := metav1.GetControllerOf(pod); c != nil && c.Kind == "ReplicaSet" && c.APIVersion == appsv1.SchemeGroupVersion.String() {
		rs = &appsv1.ReplicaSet{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: c.Name}, rs); err != nil {
			if !apierrors.IsNotFound(err) {
				return "", err
			}
			rs = nil
		}
	}
	if err := verifyChain(fleet, dep, rs, pod, ref, host); err != nil {
		return err.Error(), nil
	}
	return "", nil
}

// verifyChain says why pod, behind an endpoint at host that names it by
// ref, is not one of the fleet's limiter pods: its controller must be rs,
// whose controller must be dep, the fleet's limiter Deployment, whose
// controller must be the fleet, each by UID; and host must be the pod's
// IP. dep or rs are nil when not found.
func verifyChain(fleet *v1beta1.LimiterFleet, dep *appsv1.Deployment, rs *appsv1.ReplicaSet, pod *corev1.Pod,
	ref *corev1.ObjectReference, host string) error {
	switch {
	case ref.UID != "" && ref.UID != pod.UID:
		return fmt.Errorf("Pod %s is not the one the endpoint names (UID %s, want %s)", pod.Name, pod.UID, ref.UID)
	case !podHasIP(pod, host):
		return fmt.Errorf("Pod %s does not have the endpoint's address %s", pod.Name, host)
	case dep == nil:
		return fmt.Errorf("the fleet has no Deployment %s yet", resources.LimiterName(fleet))
	case !controlledBy(dep, fleet.UID, v1beta1.GroupVersion.Group, "LimiterFleet", fleet.Name):
		return fmt.Errorf("Deployment %s is not controlled by the fleet", dep.Name)
	}
	c := metav1.GetControllerOf(pod)
	switch {
	case c == nil:
		return fmt.Errorf("Pod %s has no controller", pod.Name)
	case rs == nil || c.Kind != "ReplicaSet" || c.APIVersion != appsv1.SchemeGroupVersion.String() || c.Name != rs.Name || c.UID != rs.UID:
		return fmt.Errorf("Pod %s is not controlled by a ReplicaSet of Deployment %s", pod.Name, dep.Name)
	case !controlledBy(rs, dep.UID, appsv1.SchemeGroupVersion.Group, "Deployment", dep.Name):
		return fmt.Errorf("ReplicaSet %s of Pod %s is not controlled by Deployment %s", rs.Name, pod.Name, dep.Name)
	}
	return nil
}

// controlledBy reports whether obj's controller is the object of that
// UID, API group (of any of its versions: a fleet's objects written under
// v1alpha1 name that version), kind and name.
func controlledBy(obj metav1.Object, uid types.UID, group, kind, name string) bool {
	c := metav1.GetControllerOf(obj)
	if c == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(c.APIVersion)
	return err == nil && uid != "" && c.UID == uid && gv.Group == group && c.Kind == kind && c.Name == name
}

func podHasIP(pod *corev1.Pod, ip string) bool {
	if pod.Status.PodIP == ip {
		return true
	}
	return slices.ContainsFunc(pod.Status.PodIPs, func(p corev1.PodIP) bool { return p.IP == ip })
}

// FleetOfLimiterObject maps a limiter Pod or ReplicaSet to the fleet its
// instance label names: the fleet then checks it (or drops it) as one of
// its endpoints.
func FleetOfLimiterObject(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	if l[resources.LabelName] != resources.LimiterAppName || l[resources.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: l[resources.LabelInstance]}}}
}

// LimiterOwnerChanged passes the events of limiter Pods and ReplicaSets
// that change which endpoints a fleet trusts: one appears or goes, or its
// owners or IP change.
var LimiterOwnerChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return isLimiterObject(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return isLimiterObject(e.Object) },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		if !isLimiterObject(e.ObjectNew) {
			return false
		}
		if !slices.EqualFunc(e.ObjectOld.GetOwnerReferences(), e.ObjectNew.GetOwnerReferences(), ownerRefEqual) {
			return true
		}
		o, okO := e.ObjectOld.(*corev1.Pod)
		n, okN := e.ObjectNew.(*corev1.Pod)
		return okO && okN && !slices.Equal(o.Status.PodIPs, n.Status.PodIPs)
	},
}

func ownerRefEqual(a, b metav1.OwnerReference) bool {
	return a.UID == b.UID && a.Kind == b.Kind && a.Name == b.Name && a.APIVersion == b.APIVersion &&
		(a.Controller != nil && *a.Controller) == (b.Controller != nil && *b.Controller)
}

func isLimiterObject(obj client.Object) bool {
	return obj.GetLabels()[resources.LabelName] == resources.LimiterAppName
}

// ServedPolicies maps the UID of each policy a fleet serves to its
// "namespace/name".
func ServedPolicies(policies []v1beta1.RateLimitPolicy) map[string]string {
	out := make(map[string]string, len(policies))
	for i := range policies {
		out[string(policies[i].UID)] = policies[i].Namespace + "/" + policies[i].Name
	}
	return out
}

// TrustedEndpoints keeps, of the fleet's ready endpoints (host:port, from
// readyEndpoints of items), those whose Pod is one of the fleet's own
// (verifyChain), and returns the others, with why, apart.
func TrustedEndpoints(ctx context.Context, r client.Reader, fleet *v1beta1.LimiterFleet,
	items []discoveryv1.EndpointSlice, endpoints []string) (trusted, refused []string, err error) {
	if len(endpoints) == 0 {
		return nil, nil, nil
	}
	refs := map[string]*corev1.ObjectReference{} // address -> target
	for i := range items {
		for j := range items[i].Endpoints {
			ep := &items[i].Endpoints[j]
			for _, a := range ep.Addresses {
				refs[a] = ep.TargetRef
			}
		}
	}
	dep := &appsv1.Deployment{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: resources.LimiterName(fleet)}, dep); {
	case apierrors.IsNotFound(err):
		dep = nil
	case err != nil:
		return nil, nil, err
	}
	for _, addr := range endpoints {
		host, _, _ := net.SplitHostPort(addr)
		why, err := checkEndpoint(ctx, r, fleet, dep, host, refs[host])
		if err != nil {
			return nil, nil, err
		}
		if why != "" {
			refused = append(refused, addr+": "+why)
			continue
		}
		trusted = append(trusted, addr)
	}
	if len(refused) > 0 {
		logf.FromContext(ctx).Info("Ignoring limiter endpoints that are not the fleet's own pods", "refused", refused)
	}
	return trusted, refused, nil
}
