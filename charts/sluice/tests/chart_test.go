package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/conversiontest"
)

const (
	release   = "sluice"
	namespace = "sluice-system"
	// The operator's ServiceAccount as the API server sees its pods.
	operatorSA = "system:serviceaccount:sluice-system:sluice-operator"
)

var (
	saGroups   = []string{"system:serviceaccounts", "system:serviceaccounts:sluice-system", "system:authenticated"}
	sluiceCRDs = []string{"ratelimitpolicies.ratelimit.sluice.dev", "limiterfleets.ratelimit.sluice.dev"}
)

// TestChart is a platform team's day with the chart, step by step on one
// API server: install, a policy, the operator at work under the chart's
// RBAC, an app team with the aggregated roles, an upgrade, uninstall, and a
// second release in namespaced mode on the CRDs the first one left.
func TestChart(t *testing.T) {
	whole := t // processes that outlive a step stop at the end of the test
	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
	var crdUIDs map[string]types.UID
	var operator *operatorProcess
	var operatorKubeconfig string
	conversion := startConversion(whole)

	step("helm install with default values", func(t *testing.T) {
		// Pod Security admission checks the operator's pod template against
		// the restricted profile; warn makes it say so for a Deployment.
		for _, ns := range []string{namespace, "payments", "identity", "team-a", "team-b"} {
			createNamespace(t, ns, map[string]string{
				"pod-security.kubernetes.io/enforce": "restricted",
				"pod-security.kubernetes.io/warn":    "restricted",
			})
		}
		out, stderr, err := helm("install", release, chartDir, "--namespace", namespace,
			"--set", "operator.webhook.url="+conversiontest.URL(conversion))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stderr, "PodSecurity") {
			t.Errorf("the operator's pod template breaks the restricted Pod Security profile:\n%s", stderr)
		}
		t.Logf("helm install:\n%s", out)
		// The notes say what an uninstall leaves behind.
		for _, want := range []string{"LimiterFleets you made outside the chart are not removed with it",
			"stays held until it expires, 15s later", "kubectl -n sluice-system delete lease operator.ratelimit.sluice.dev"} {
			if !strings.Contains(out, want) {
				t.Errorf("the chart's notes lack %q", want)
			}
		}
	})

	step("the CRDs are established", func(t *testing.T) {
		crdUIDs = map[string]types.UID{}
		for _, name := range sluiceCRDs {
			eventually(t, settle, func() error {
				var crd apiextensionsv1.CustomResourceDefinition
				if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
					return err
				}
				for _, c := range crd.Status.Conditions {
					if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
						crdUIDs[name] = crd.UID
						return nil
					}
				}
				return fmt.Errorf("CRD %s not established: %+v", name, crd.Status.Conditions)
			})
		}
		trustConversion(t, conversion)
	})

	step("every object exists as rendered", func(t *testing.T) {
		objs, err := decode(mustHelm(t, "get", "manifest", release, "--namespace", namespace))
		if err != nil {
			t.Fatal(err)
		}
		checkObjectsAsRendered(t, objs)
	})

	step("rendered manifests pass the API server's validation", func(t *testing.T) {
		sets := [][]string{nil, {"--set", "fleet.enabled=true,crds.enabled=false,rbac.create=false"},
			{"--set", "fleet.enabled=true,crds.enabled=false,rbac.create=false", "-f", filepath.Join(repoRoot, "config", "samples", "helm", "values.yaml")}}
		for _, f := range ciValues(t) {
			sets = append(sets, []string{"-f", f})
		}
		for _, set := range sets {
			// The installed CRD converts at operator.webhook.url (startConversion):
			// a render with the Service instead would apply both, which the
			// API server refuses.
			set = append(set, "--set", "operator.webhook.url="+conversiontest.URL(conversion))
			out, _, err := run("", helmBin, append([]string{"template", release, chartDir, "--namespace", namespace}, set...)...)
			if err != nil {
				t.Fatal(err)
			}
			// Server-side apply, dry run: the API server's defaulting,
			// OpenAPI and CEL validation (and our CRDs' schemas), with
			// unknown or duplicate fields as errors, and its admission.
			_, stderr, err := kubectl(adminConfig, out, "apply", "--server-side", "--dry-run=server", "--force-conflicts",
				"--validate=strict", "--field-manager=chart-test", "-f", "-")
			if err != nil {
				t.Errorf("values %v: %v", set, err)
			}
			if strings.Contains(stderr, "PodSecurity") || strings.Contains(stderr, "unknown field") {
				t.Errorf("values %v: %s", set, stderr)
			}
		}
	})

	step("a sample RateLimitPolicy can be applied with kubectl", func(t *testing.T) {
		out := mustKubectl(t, "apply", "-f", filepath.Join(repoRoot, "config", "samples", "policies.yaml"))
		t.Logf("kubectl apply -f config/samples/policies.yaml:\n%s", out)
		var rlps v1alpha1.RateLimitPolicyList
		if err := k8s.List(ctx, &rlps, client.InNamespace("payments")); err != nil || len(rlps.Items) == 0 {
			t.Fatalf("no policies in payments after kubectl apply: %v", err)
		}
	})

	step("the operator's ServiceAccount can do what the operator needs, and no more", func(t *testing.T) {
		checkOperatorAccess(t, operatorSA, saGroups, "payments", namespace)
		checkWebhookCertAccess(t, operatorSA, saGroups, namespace, "sluice-operator-webhook-cert") // release sluice
	})

	step("the operator runs under the chart's RBAC", func(t *testing.T) {
		objs, err := decode(mustHelm(t, "get", "manifest", release, "--namespace", namespace))
		if err != nil {
			t.Fatal(err)
		}
		if operatorKubeconfig, err = addUser(operatorSA, saGroups...); err != nil {
			t.Fatal(err)
		}
		if operator, err = startOperator(whole, operatorKubeconfig, operatorArgs(t, objs)); err != nil {
			t.Fatal(err)
		}
		// Leader election in the release namespace, with the Lease Role.
		eventually(t, settle, func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "operator.ratelimit.sluice.dev"}, unstructuredOf("coordination.k8s.io/v1", "Lease"))
		})
		// Policies get a status; none is accepted yet, as no fleet allows
		// their domain.
		waitForCondition(t, "payments", "charges-per-user", v1beta1.AcceptedCondition, metav1.ConditionFalse)
		var p v1alpha1.RateLimitPolicy
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "payments", Name: "charges-per-user"}, &p); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.AcceptedCondition); c.Reason != v1beta1.DomainNotAllowedReason {
			t.Errorf("Accepted %s %s: %s, want reason %s", c.Status, c.Reason, c.Message, v1beta1.DomainNotAllowedReason)
		}
	})

	step("helm upgrade with changed values updates the operator and keeps the CRDs", func(t *testing.T) {
		var before appsv1.Deployment
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "sluice-operator"}, &before); err != nil {
			t.Fatal(err)
		}
		mustHelm(t, "upgrade", release, chartDir, "--namespace", namespace, "--reuse-values",
			"--set", "operator.replicas=2", "--set", "operator.logLevel=debug", "--set", "operator.podDisruptionBudget.enabled=true",
			"--set", "fleet.enabled=true", "--set", "redis.image.repository=mirror.example.com/library/redis",
			// The README's values: the fleet allows the sample policies' domains.
			"-f", filepath.Join(repoRoot, "config", "samples", "helm", "values.yaml"))
		var after appsv1.Deployment
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "sluice-operator"}, &after); err != nil {
			t.Fatal(err)
		}
		if *after.Spec.Replicas != 2 || !hasArg(after.Spec.Template.Spec.Containers[0].Args, "--zap-log-level=debug") || after.Generation <= before.Generation {
			t.Errorf("after helm upgrade: replicas %d, args %q, generation %d -> %d", *after.Spec.Replicas,
				after.Spec.Template.Spec.Containers[0].Args, before.Generation, after.Generation)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "sluice-operator"}, unstructuredOf("policy/v1", "PodDisruptionBudget")); err != nil {
			t.Errorf("no PodDisruptionBudget after the upgrade: %v", err)
		}
		checkCRDsKept(t, crdUIDs)

		// The operator's pod rolls to the new arguments: the old one stops
		// (SIGTERM) and hands its Lease over, so that the new one leads at
		// once rather than after leaseDurationSeconds.
		operator.stop(whole)
		lease := unstructuredOf("coordination.k8s.io/v1", "Lease")
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "operator.ratelimit.sluice.dev"}, lease); err != nil {
			t.Fatal(err)
		}
		if holder, _, _ := unstructured.NestedString(lease.Object, "spec", "holderIdentity"); holder != "" {
			t.Errorf("the stopped operator still holds its Lease (holderIdentity %q): the next leader waits for it to expire", holder)
		}
		objs, err := decode(mustHelm(t, "get", "manifest", release, "--namespace", namespace))
		if err != nil {
			t.Fatal(err)
		}
		if operator, err = startOperator(whole, operatorKubeconfig, operatorArgs(t, objs)); err != nil {
			t.Fatal(err)
		}
	})

	step("the operator renders the chart's fleet with the chart's limiter image", func(t *testing.T) {
		// Creating the fleet's Role and RoleBinding needs the operator to
		// hold what they grant: the API server's escalation check.
		for _, o := range []client.Object{&corev1.ConfigMap{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.Service{}} {
			name := "default-limiter"
			if _, ok := o.(*corev1.ConfigMap); ok {
				name = "default-snapshot"
			}
			eventually(t, settle, func() error {
				return k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, o)
			})
		}
		var d appsv1.Deployment
		eventually(t, settle, func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "default-limiter"}, &d)
		})
		// The fleet's limiters may review their admin plane's callers: the
		// operator binds system:auth-delegator to their ServiceAccount.
		eventually(t, settle, func() error {
			var crb rbacv1.ClusterRoleBinding
			if err := k8s.Get(ctx, client.ObjectKey{Name: "sluice-limiter-auth-delegator"}, &crb); err != nil {
				return err
			}
			want := rbacv1.Subject{Kind: "ServiceAccount", Namespace: namespace, Name: "default-limiter"}
			if len(crb.Subjects) != 1 || crb.Subjects[0] != want || crb.RoleRef.Name != "system:auth-delegator" {
				return fmt.Errorf("auth delegator binding %+v, want %+v bound to system:auth-delegator", crb, want)
			}
			return nil
		})
		limiterSA := "system:serviceaccount:" + namespace + ":default-limiter"
		limiterGroups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
		for _, res := range []string{"tokenreviews", "subjectaccessreviews"} {
			group := map[string]string{"tokenreviews": "authentication.k8s.io", "subjectaccessreviews": "authorization.k8s.io"}[res]
			if !allowed(t, limiterSA, limiterGroups, authorizationv1.ResourceAttributes{Verb: "create", Group: group, Resource: res}) {
				t.Errorf("the fleet's limiters can't create %s: --admin-auth=kubernetes needs it", res)
			}
		}
		want := "ghcr.io/sluice-dev/sluice-limiter:" + appVersion(t)
		if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("limiter image %s, want %s (the chart's --limiter-image)", got, want)
		}
		waitForCondition(t, "payments", "charges-per-user", v1beta1.AcceptedCondition, metav1.ConditionTrue)
		// What the README's "Install on Kubernetes" shows.
		eventually(t, settle, func() error {
			var f v1alpha1.LimiterFleet
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "default"}, &f); err != nil {
				return err
			}
			if f.Status.Snapshot == nil || f.Status.Snapshot.Policies == 0 {
				return fmt.Errorf("fleet status %+v: no snapshot yet", f.Status)
			}
			return nil
		})
		t.Logf("$ kubectl get rlp -n payments\n%s", mustKubectl(t, "get", "rlp", "-n", "payments"))
		t.Logf("$ kubectl get limiterfleet -n sluice-system\n%s", mustKubectl(t, "get", "limiterfleet", "-n", namespace))
		t.Logf("$ kubectl get rlp charges-per-user -n payments -o jsonpath=...\n%s", mustKubectl(t, "get", "rlp", "charges-per-user", "-n", "payments",
			"-o", `jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}`))
	})

	step("a Redis Cluster fleet with auth: under the chart's RBAC the operator reads that Secret and writes the fleet's auth Secret", func(t *testing.T) {
		createNamespace(t, "cache", nil)
		mustKubectl(t, "create", "secret", "generic", "redis-auth", "-n", "cache", "--from-literal=password=s3cret")
		if _, stderr, err := kubectl(adminConfig, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata:
  name: counted
  namespace: cache
spec:
  redis:
    mode: Cluster
    shards: 3
    replicasPerShard: 1
    auth:
      secretName: redis-auth
`, "apply", "-f", "-"); err != nil {
			t.Fatalf("creating the fleet: %v\n%s", err, stderr)
		}
		// The auth Secret, created by the operator (the chart's RBAC lets it
		// get, create and update Secrets by name), holds the users file with
		// the hash of redis.auth's password for the limiters' user, and not
		// that password.
		authSecret := func(password string) *corev1.Secret {
			t.Helper()
			want := "user " + resources.RedisLimiterUser + " on resetpass #" + sha256Hex(password) + " "
			var secret corev1.Secret
			eventually(t, settle, func() error {
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: "cache", Name: "counted-redis-auth"}, &secret); err != nil {
					return err
				}
				if users := string(secret.Data[resources.RedisUsersKey]); !strings.Contains(users, want) {
					return fmt.Errorf("users file has no %q", want)
				}
				return nil
			})
			if _, ok := secret.Data[resources.RedisLimiterPasswordKey]; ok {
				t.Errorf("the auth Secret holds the limiters' password, which redis.auth's Secret has")
			}
			if owner := metav1.GetControllerOf(&secret); owner == nil || owner.Kind != "LimiterFleet" || owner.Name != "counted" {
				t.Errorf("auth Secret controlled by %+v, want the fleet", owner)
			}
			return &secret
		}
		authSecret("s3cret")
		var f v1alpha1.LimiterFleet
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: "cache", Name: "counted"}, &f); err != nil {
				return err
			}
			c := meta.FindStatusCondition(f.Status.Conditions, v1beta1.RedisReadyCondition)
			if c == nil || c.Reason != v1beta1.WaitingForNodesReason {
				return fmt.Errorf("RedisReady %+v, want WaitingForNodes: no kubelet starts the pods here", c)
			}
			return nil
		})
		for _, kind := range []string{"StatefulSet", "PodDisruptionBudget"} {
			if out := mustKubectl(t, "get", kind, "-n", "cache", "-o", "name"); strings.Count(out, "counted-redis-") != 3 {
				t.Errorf("%ss of the fleet: %q, want 3", kind, out)
			}
		}
		// The fleet names no image: its Redis runs the chart's redis.image.
		var set appsv1.StatefulSet
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "cache", Name: "counted-redis-0"}, &set); err != nil {
			t.Fatal(err)
		}
		if got, want := set.Spec.Template.Spec.Containers[0].Image, "mirror.example.com/library/redis:7.2"; got != want {
			t.Errorf("Redis image %s, want %s (the chart's redis.image, the operator's --redis-image)", got, want)
		}
		// A new password in redis.auth's Secret reaches the users file.
		var userSecret corev1.Secret
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "cache", Name: "redis-auth"}, &userSecret); err != nil {
			t.Fatal(err)
		}
		userSecret.Data["password"] = []byte("s3cret-2")
		if err := k8s.Update(ctx, &userSecret); err != nil {
			t.Fatal(err)
		}
		authSecret("s3cret-2")
		mustKubectl(t, "delete", "limiterfleet", "counted", "-n", "cache")
	})

	step("the aggregated edit role lets an app team manage policies in its namespace only", func(t *testing.T) {
		aggregateClusterRoles(t)
		mustKubectl(t, "create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "--namespace=payments")
		mustKubectl(t, "create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "--namespace=payments")
		alice, err := addUser("alice")
		if err != nil {
			t.Fatal(err)
		}
		bob, err := addUser("bob")
		if err != nil {
			t.Fatal(err)
		}
		policy := func(ns string) string {
			return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: checkout-per-user, namespace: %s}
spec:
  domain: checkout-api
  descriptors: [{key: user_id}]
  rate: {limit: 10, period: 1s}
`, ns)
		}
		if _, _, err := kubectl(alice, policy("payments"), "apply", "-f", "-"); err != nil {
			t.Errorf("alice (edit in payments) can't create a policy there: %v", err)
		}
		if _, _, err := kubectl(alice, "", "delete", "rlp", "checkout-per-user", "-n", "payments"); err != nil {
			t.Errorf("alice (edit in payments) can't delete a policy there: %v", err)
		}
		if _, stderr, err := kubectl(alice, policy("identity"), "apply", "-f", "-"); err == nil || !strings.Contains(stderr, "forbidden") {
			t.Errorf("alice created a policy in identity, where she has no role: %v %s", err, stderr)
		}
		if _, _, err := kubectl(alice, "", "get", "limiterfleets", "-n", "payments"); err != nil {
			t.Errorf("alice can't list fleets in payments: %v", err)
		}
		if ok := allowed(t, "alice", nil, authorizationv1.ResourceAttributes{Namespace: "payments", Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: "limiterfleets"}); ok {
			t.Error("alice (edit) can create LimiterFleets; they are for cluster administrators")
		}
		if _, _, err := kubectl(bob, "", "get", "rlp", "-n", "payments"); err != nil {
			t.Errorf("bob (view in payments) can't list policies: %v", err)
		}
		if _, stderr, err := kubectl(bob, policy("payments"), "apply", "-f", "-"); err == nil || !strings.Contains(stderr, "forbidden") {
			t.Errorf("bob (view) created a policy: %v %s", err, stderr)
		}
		// Neither reads a limiter's admin plane nor its metrics.
		for _, user := range []string{"alice", "bob"} {
			for _, path := range []string{"/v1/admin/stats", "/v1/admin/snapshot", "/metrics"} {
				if allowedURL(t, user, nil, "get", path) {
					t.Errorf("%s may get %s on the limiters' admin plane", user, path)
				}
			}
		}
	})

	step("Prometheus may scrape the limiters' /metrics and nothing else of their admin plane", func(t *testing.T) {
		mustHelm(t, "upgrade", release, chartDir, "--namespace", namespace, "--reuse-values",
			"--set", "limiter.metrics.podMonitor.enabled=true", "--set", "limiter.metrics.readers[0].kind=ServiceAccount",
			"--set", "limiter.metrics.readers[0].name=prometheus", "--set", "limiter.metrics.readers[0].namespace=monitoring")
		for _, sa := range []string{"sluice-limiter-metrics-reader", "prometheus"} {
			ns := namespace
			if sa == "prometheus" {
				ns = "monitoring"
			}
			user := "system:serviceaccount:" + ns + ":" + sa
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
			if !allowedURL(t, user, groups, "get", "/metrics") {
				t.Errorf("%s may not get /metrics", user)
			}
			for _, path := range []string{"/v1/admin/stats", "/v1/admin/snapshot"} {
				if allowedURL(t, user, groups, "get", path) {
					t.Errorf("%s may get %s", user, path)
				}
			}
		}
		var pm unstructured.Unstructured
		pm.SetAPIVersion("monitoring.coreos.com/v1")
		pm.SetKind("PodMonitor")
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "sluice-limiter"}, &pm); err != nil {
			t.Fatal(err)
		}
		ep, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		secret, _, _ := unstructured.NestedString(ep[0].(map[string]any), "authorization", "credentials", "name")
		var sec corev1.Secret
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secret}, &sec); err != nil ||
			sec.Type != corev1.SecretTypeServiceAccountToken || sec.Annotations[corev1.ServiceAccountNameKey] != "sluice-limiter-metrics-reader" {
			t.Errorf("the PodMonitor's token Secret %q: %v %+v", secret, err, sec.ObjectMeta)
		}
	})

	step("helm uninstall keeps the CRDs and the policies", func(t *testing.T) {
		operator.stop(whole)
		out := mustHelm(t, "uninstall", release, "--namespace", namespace)
		if !strings.Contains(out, "kept due to the resource policy") {
			t.Errorf("helm uninstall didn't report kept resources:\n%s", out)
		}
		checkCRDsKept(t, crdUIDs)
		var rlps v1alpha1.RateLimitPolicyList
		if err := k8s.List(ctx, &rlps, client.InNamespace("payments")); err != nil || len(rlps.Items) == 0 {
			t.Errorf("policies gone after helm uninstall: %v", err)
		}
		// As the notes say: the Lease stays; released here, since this test
		// stops the operator before the release's RBAC goes (on a real
		// cluster the pod outlives it, and the Lease expires instead: the
		// e2e journey's step 10).
		lease := unstructuredOf("coordination.k8s.io/v1", "Lease")
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "operator.ratelimit.sluice.dev"}, lease); err != nil {
			t.Errorf("the Lease the notes say helm uninstall leaves: %v", err)
		} else if holder, _, _ := unstructured.NestedString(lease.Object, "spec", "holderIdentity"); holder != "" {
			t.Errorf("the Lease is still held by %q after the operator stopped", holder)
		}
		for _, o := range []client.Object{&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "sluice-operator"}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sluice-operator"}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sluice-edit"}},
			&v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "default"}}} {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				t.Errorf("%T %s still there after helm uninstall: %v", o, o.GetName(), err)
			}
		}
	})

	step("namespaced mode: a second release on the kept CRDs, with a Role per watched namespace", func(t *testing.T) {
		const ns2, sa2 = "sluice-tenants", "system:serviceaccount:sluice-tenants:tenants-sluice-operator"
		groups2 := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns2, "system:authenticated"}
		createNamespace(t, ns2, nil)
		// The fleet comes in the same step: the CRDs are already there.
		mustHelm(t, "install", "tenants", chartDir, "--namespace", ns2, "--set", "crds.enabled=false",
			"-f", filepath.Join(chartDir, "ci", "namespaced-values.yaml"))
		checkOperatorAccess(t, sa2, groups2, "team-a", "team-a")
		if allowed(t, sa2, groups2, authorizationv1.ResourceAttributes{Namespace: "payments", Verb: "list", Group: v1alpha1.GroupVersion.Group, Resource: "ratelimitpolicies"}) {
			t.Error("the namespaced operator can list policies in payments, which it doesn't watch")
		}
		if allowed(t, sa2, groups2, authorizationv1.ResourceAttributes{Verb: "list", Group: v1alpha1.GroupVersion.Group, Resource: "ratelimitpolicies"}) {
			t.Error("the namespaced operator can list policies cluster-wide")
		}
		if allowed(t, sa2, groups2, authorizationv1.ResourceAttributes{Namespace: "payments", Verb: "get", Resource: "secrets"}) {
			t.Error("the namespaced operator can read Secrets in payments, which it doesn't watch")
		}

		objs, err := decode(mustHelm(t, "get", "manifest", "tenants", "--namespace", ns2))
		if err != nil {
			t.Fatal(err)
		}
		checkObjectsAsRendered(t, objs)
		kc, err := addUser(sa2, groups2...)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = kubectl(adminConfig, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: search-per-client
  namespace: team-a
  labels: {sluice.dev/fleet: edge}
spec:
  domain: search-api
  descriptors: [{key: client_id}]
  rate: {limit: 50, period: 1s}
`, "apply", "-f", "-")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := startOperator(whole, kc, operatorArgs(t, objs)); err != nil {
			t.Fatal(err)
		}
		waitForCondition(t, "team-a", "search-per-client", v1beta1.AcceptedCondition, metav1.ConditionTrue)
		eventually(t, settle, func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "edge-limiter"}, &rbacv1.Role{})
		})
		t.Logf("$ kubectl get rlp -n team-a\n%s", mustKubectl(t, "get", "rlp", "-n", "team-a"))
		mustHelm(t, "uninstall", "tenants", "--namespace", ns2)
		var roles rbacv1.RoleList
		if err := k8s.List(ctx, &roles, client.InNamespace("team-b"), client.MatchingLabels{"app.kubernetes.io/instance": "tenants"}); err != nil || len(roles.Items) != 0 {
			t.Errorf("helm uninstall left Roles in team-b: %v %v", err, roles.Items)
		}
	})
}

func createNamespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// unstructuredOf is an empty object of a kind, for client.Get.
func unstructuredOf(apiVersion, kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	return u
}

// checkObjectsAsRendered gets each rendered object from the API server, and
// compares RBAC objects' rules, role references and subjects.
func checkObjectsAsRendered(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		got := unstructuredOf(o.GetAPIVersion(), o.GetKind())
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			continue
		}
		switch o.GetKind() {
		case "ClusterRole", "Role":
			want, have := convert[rbacv1.ClusterRole](t, o), convert[rbacv1.ClusterRole](t, got)
			if !reflect.DeepEqual(grants(want.Rules), grants(have.Rules)) {
				t.Errorf("%s %s rules %v, rendered %v", o.GetKind(), o.GetName(), have.Rules, want.Rules)
			}
		case "ClusterRoleBinding", "RoleBinding":
			want, have := convert[rbacv1.RoleBinding](t, o), convert[rbacv1.RoleBinding](t, got)
			if want.RoleRef != have.RoleRef || !reflect.DeepEqual(want.Subjects, have.Subjects) {
				t.Errorf("%s %s: %v %v, rendered %v %v", o.GetKind(), o.GetName(), have.RoleRef, have.Subjects, want.RoleRef, want.Subjects)
			}
		}
	}
}

func checkCRDsKept(t *testing.T, uids map[string]types.UID) {
	t.Helper()
	for _, name := range sluiceCRDs {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Errorf("CRD %s: %v", name, err)
			continue
		}
		if crd.UID != uids[name] || crd.DeletionTimestamp != nil {
			t.Errorf("CRD %s was replaced or is being deleted (uid %s, was %s)", name, crd.UID, uids[name])
		}
	}
}

func waitForCondition(t *testing.T, ns, name, condition string, status metav1.ConditionStatus) {
	t.Helper()
	eventually(t, settle, func() error {
		var p v1alpha1.RateLimitPolicy
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, condition); c == nil || c.Status != status {
			return fmt.Errorf("policy %s/%s condition %s: %+v, want %s", ns, name, condition, c, status)
		}
		return nil
	})
}

// allowed asks the API server's authorizer, as kubectl auth can-i does.
func allowed(t *testing.T, user string, groups []string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	return review(t, authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs})
}

// allowedURL reports whether user may verb the non-resource URL path, such
// as a limiter's admin plane.
func allowedURL(t *testing.T, user string, groups []string, verb, path string) bool {
	t.Helper()
	return review(t, authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: path}})
}

func review(t *testing.T, spec authorizationv1.SubjectAccessReviewSpec) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: spec}
	if err := k8s.Create(ctx, sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// checkOperatorAccess checks, with SubjectAccessReviews, that the operator's
// user may do everything config/rbac/role.yaml says the controllers need,
// in a watched namespace (and Leases in its leader election namespace), and
// nothing the operator has no business doing.
func checkOperatorAccess(t *testing.T, user string, groups []string, watched, leaderNS string) {
	t.Helper()
	clusterScoped := map[string]bool{"namespaces": true, "clusterrolebindings": true, "clusterroles": true}
	for _, r := range generatedRules(t) {
		for _, u := range r.NonResourceURLs {
			for _, verb := range r.Verbs {
				if path := strings.TrimSuffix(u, "*") + "snapshot"; !allowedURL(t, user, groups, verb, path) {
					t.Errorf("%s can't %s %s; the controllers' markers need it", user, verb, path)
				}
			}
		}
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, verb := range r.Verbs {
				a := authorizationv1.ResourceAttributes{Verb: verb, Group: r.APIGroups[0], Resource: resource, Subresource: sub}
				if len(r.ResourceNames) > 0 {
					a.Name = r.ResourceNames[0]
				}
				switch {
				case clusterScoped[resource]:
				case resource == "leases":
					a.Namespace = leaderNS
				default:
					a.Namespace = watched
				}
				if !allowed(t, user, groups, a) {
					t.Errorf("%s can't %s %s/%s in %q; the controllers' markers need it", user, verb, a.Group, res, a.Namespace)
				}
			}
		}
	}
	denied := []authorizationv1.ResourceAttributes{
		{Verb: "list", Resource: "secrets"},
		{Verb: "watch", Resource: "secrets"},
		{Verb: "list", Resource: "secrets", Namespace: watched},
		{Verb: "watch", Resource: "secrets", Namespace: watched},
		{Verb: "patch", Resource: "secrets", Namespace: watched},
		{Verb: "list", Resource: "secrets", Namespace: "kube-system"},
		{Verb: "create", Resource: "pods", Namespace: watched},
		{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: watched},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
		{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "roles", Namespace: watched},
		{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
		{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "cluster-admin"},
		{Verb: "patch", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings", Name: "cluster-admin"},
		{Verb: "impersonate", Resource: "users"},
		{Verb: "delete", Group: v1alpha1.GroupVersion.Group, Resource: "ratelimitpolicies", Namespace: watched},
		{Verb: "update", Group: v1alpha1.GroupVersion.Group, Resource: "ratelimitpolicies", Namespace: watched},
		{Verb: "delete", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
	}
	for _, a := range denied {
		if allowed(t, user, groups, a) {
			t.Errorf("%s may %s %s/%s %s in %q", user, a.Verb, a.Resource, a.Subresource, a.Name, a.Namespace)
		}
	}
	// The limiters' admin plane, but not their metrics: that is
	// Prometheus's.
	if allowedURL(t, user, groups, "get", "/metrics") {
		t.Errorf("%s may get the limiters' /metrics", user)
	}
}

// aggregateClusterRoles does the job of kube-controller-manager's
// clusterrole-aggregation controller, which envtest doesn't run: each
// ClusterRole with an aggregationRule gets the rules of the ClusterRoles its
// selectors match. The selectors are the API server's own bootstrap ones
// (view, edit, admin), so this checks the chart's labels.
func aggregateClusterRoles(t *testing.T) {
	t.Helper()
	var all rbacv1.ClusterRoleList
	if err := k8s.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	sort.Slice(all.Items, func(i, j int) bool { return all.Items[i].Name < all.Items[j].Name })
	for i := range all.Items {
		agg := &all.Items[i]
		if agg.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range agg.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				t.Fatal(err)
			}
			for _, cr := range all.Items {
				if cr.Name != agg.Name && s.Matches(labels.Set(cr.Labels)) {
					for _, r := range cr.Rules {
						if !containsRule(rules, r) {
							rules = append(rules, r)
						}
					}
				}
			}
		}
		agg.Rules = rules
		if err := k8s.Update(ctx, agg); err != nil {
			t.Fatal(err)
		}
	}
}

func containsRule(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) bool {
	for _, x := range rules {
		if reflect.DeepEqual(x, r) {
			return true
		}
	}
	return false
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// checkWebhookCertAccess: the one exception to "never lists or watches
// Secrets". cert-controller keeps the conversion webhook's certificate in
// a Secret of the operator's own namespace through a cache of that
// namespace's Secrets, so the operator may get, list and watch Secrets
// there, and write only that one.
func checkWebhookCertAccess(t *testing.T, user string, groups []string, ns, secret string) {
	t.Helper()
	for _, verb := range []string{"get", "list", "watch"} {
		if !allowed(t, user, groups, authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets", Namespace: ns}) {
			t.Errorf("%s can't %s secrets in %s: the webhook's certificate rotation needs it", user, verb, ns)
		}
	}
	if !allowed(t, user, groups, authorizationv1.ResourceAttributes{Verb: "update", Resource: "secrets", Namespace: ns, Name: secret}) {
		t.Errorf("%s can't update the webhook's certificate Secret %s/%s", user, ns, secret)
	}
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "patch", Resource: "secrets", Namespace: ns, Name: "another"},
		{Verb: "list", Resource: "secrets", Namespace: "payments"},
		{Verb: "watch", Resource: "secrets"},
	} {
		if allowed(t, user, groups, a) {
			t.Errorf("%s may %s secrets %q in %q", user, a.Verb, a.Name, a.Namespace)
		}
	}
}
