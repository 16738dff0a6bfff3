package tests

import (
	"context"

	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// Attack (issue 40, 7): the default install gives the operator
// cluster-wide create of Deployments, StatefulSets, Roles, RoleBindings,
// ServiceAccounts and Secrets, so compromising it was taking over the
// cluster. With the chart's RBAC and its ValidatingAdmissionPolicy applied
// to envtest (kube-apiserver 1.33), acting as the operator's
// ServiceAccount: a Deployment without Sluice's labels, a RoleBinding or
// ClusterRoleBinding to cluster-admin (the API server's escalation check),
// bindings of system:auth-delegator (which the operator may bind) other
// than its one, a privileged pod, a Pod, a hostPath
// volume, a Deployment running as another ServiceAccount, a Role that
// reads Secrets and taking over another's ConfigMap are each denied; and
// every kind the operator's own builders render is admitted (dry run), so
// the policy holds the operator to what it does and no less.
func TestAttackCompromisedOperator(t *testing.T) {
	const rel, ns, fleetNS = "held", "held-system", "held-fleet"
	createNamespace(t, ns, nil)
	createNamespace(t, fleetNS, nil)
	objs := render(t, rel, ns)
	applyOperatorRBACAndPolicy(t, objs)
	var sa string
	for _, o := range find(objs, "ServiceAccount") {
		if o.GetLabels()["app.kubernetes.io/component"] == "operator" {
			sa = o.GetName()
		}
	}
	op := clientAs(t, "system:serviceaccount:"+ns+":"+sa, "system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated")
	awaitPolicy(t, op, fleetNS)

	// A RoleBinding's escalation check reads its Role: the fleet's
	// limiter Role is created for real, as the operator (admitted).
	role := resources.BuildLimiterRole(&v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "edge"}})
	if err := op.Create(ctx, role); err != nil {
		t.Fatalf("the limiter Role, as the operator renders it: %v", err)
	}
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "theirs"}, Data: map[string]string{"a": "b"}}
	if err := k8s.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	sluice := map[string]string{resources.LabelManagedBy: resources.ManagedBy, resources.LabelPartOf: resources.PartOf}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: fleetNS, Name: name, Labels: sluice}
	}
	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"a Deployment without Sluice's labels", func() error {
			d := deployment(meta("unlabelled"), corev1.Container{Name: "c", Image: "busybox"})
			d.Labels = nil
			return op.Create(ctx, d)
		}},
		{"a RoleBinding to cluster-admin", func() error {
			return op.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta("evil"), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: fleetNS, Name: "evil"}}})
		}},
		{"a ClusterRoleBinding to cluster-admin", func() error {
			m := meta(resources.LimiterAuthDelegatorBinding)
			m.Namespace = ""
			return op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: m, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: fleetNS, Name: "evil"}}})
		}},
		{"a RoleBinding of a ClusterRole the operator may bind", func() error {
			return op.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta("delegate"), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: fleetNS, Name: "delegate"}}})
		}},
		{"a RoleBinding of its Role to another namespace's ServiceAccount", func() error {
			return op.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta("edge-limiter"), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "edge-limiter"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "edge-limiter"}}})
		}},
		{"another ClusterRoleBinding of system:auth-delegator, to a user", func() error {
			m := meta("another-delegator")
			m.Namespace = ""
			return op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: m, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "mallory"}}})
		}},
		{"a privileged pod", func() error {
			return op.Create(ctx, deployment(meta("privileged"), corev1.Container{Name: "c", Image: "busybox",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}))
		}},
		{"a Pod", func() error {
			return op.Create(ctx, &corev1.Pod{ObjectMeta: meta("pod"), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}})
		}},
		{"a hostPath volume", func() error {
			d := deployment(meta("hostpath"), corev1.Container{Name: "c", Image: "busybox"})
			d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			return op.Create(ctx, d)
		}},
		{"a Deployment as another ServiceAccount", func() error {
			d := deployment(meta("borrowed"), corev1.Container{Name: "c", Image: "busybox"})
			d.Spec.Template.Spec.ServiceAccountName = "default"
			return op.Create(ctx, d)
		}},
		{"a Role that reads Secrets", func() error {
			return op.Create(ctx, &rbacv1.Role{ObjectMeta: meta("secrets"), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}})
		}},
		{"taking over another's ConfigMap", func() error {
			cm := theirs.DeepCopy()
			cm.Labels = sluice
			return op.Update(ctx, cm)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
				t.Errorf("as the operator: %v; want it denied", err)
			}
			t.Logf("denied: %v", err)
		})
	}
	t.Run("what the operator renders", func(t *testing.T) {
		// The limiter Role is created above; the rest only dry run.
		for _, obj := range renderedFleet(fleetNS) {
			err := op.Create(ctx, obj, client.DryRunAll)
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("%T %s: %v; the policy must admit what the operator renders", obj, obj.GetName(), err)
			}
		}
	})
}

// applyOperatorRBACAndPolicy creates, of the rendered chart, the
// operator's ServiceAccount, its RBAC and the admission policy.
func applyOperatorRBACAndPolicy(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	kinds := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	var policies int
	for _, o := range objs {
		if !kinds[o.GetKind()] {
			continue
		}
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			policies++
		}
		if err := k8s.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	if policies != 2 {
		t.Fatalf("the chart renders %d ValidatingAdmissionPolicy objects by default, want the policy and its binding", policies)
	}
}

// clientAs is a client of the API server authenticated as user.
func clientAs(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	kubeconfig, err := addUser(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitPolicy waits until the API server enforces the policy: the
// operator's dry-run write of an unlabelled ConfigMap is denied by it.
func awaitPolicy(t *testing.T, op client.Client, ns string) {
	t.Helper()
	var last error
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		last = op.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "canary"}}, client.DryRunAll)
		if last != nil && strings.Contains(last.Error(), "the Sluice operator writes only objects labelled") {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the admission policy is not enforced after 90s: an unlabelled ConfigMap written as the operator: %v", last)
}

// deployment is a Deployment of one container, running as the
// ServiceAccount of its own name, as the operator renders its limiters.
func deployment(meta metav1.ObjectMeta, c corev1.Container) *appsv1.Deployment {
	sel := map[string]string{"app": meta.Name}
	return &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: sel},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec: corev1.PodSpec{ServiceAccountName: meta.Name, Containers: []corev1.Container{c}}},
	}}
}

// renderedFleet is every kind the operator's builders render for a Cluster
// fleet in ns.
func renderedFleet(ns string) []client.Object {
	b := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge", UID: "7b1f6c1e-0000-4000-8000-000000000001"},
		Spec: v1beta1.LimiterFleetSpec{Store: v1beta1.Store{Type: v1beta1.StoreCluster}}}
	return []client.Object{
		resources.BuildLimiterServiceAccount(b), resources.BuildLimiterRoleBinding(b),
		resources.BuildLimiterDeployment(b, resources.LimiterDeploymentOptions{DefaultImage: "sluice-limiter:test", StoreURL: "memory"}),
		resources.BuildLimiterService(b), resources.BuildLimiterPDB(b), resources.BuildSnapshotConfigMap(b, []byte("{}"), "v1"),
		resources.BuildLimiterAuthDelegation([]v1beta1.LimiterFleet{*b}),
		resources.BuildRedisStatefulSet(b, 0, "redis:7", resources.RedisSecretHashes{}), resources.BuildRedisService(b),
		resources.BuildRedisConfigMap(b), resources.BuildTopKKeySecret(b, []byte("key")),
		resources.BuildLimiterNetworkPolicy(b, resources.NetworkPolicyOptions{OperatorNamespace: "held-system"}),
	}
}
