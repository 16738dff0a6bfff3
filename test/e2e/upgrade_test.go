package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// upgradeUninstall changes a value with helm upgrade (the operator rolls,
// the fleets and policies keep their state), then uninstalls the release:
// the CRDs, the fleets and the policies stay, as the chart promises, and
// the limiters keep answering without an operator.
func (j *journey) upgradeUninstall(t *testing.T) {
	c, f := j.c, j.fleet
	ctx := context.Background()
	start := time.Now()
	c.helm(t, "upgrade", release, "charts/sluice", "--namespace", system, "--reuse-values", "--set", "operator.logLevel=debug")
	dep := j.operatorDeployment(t)
	c.kubectl(t, "rollout", "status", "-n", system, "deployment/"+dep.Name, "--timeout=3m")
	dep = j.operatorDeployment(t)
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--zap-log-level=debug") {
		t.Errorf("after helm upgrade --set operator.logLevel=debug the operator runs with %q", args)
	}
	waitFor(t, "the fleet Ready under the upgraded operator", 2*time.Minute, func() (bool, string) {
		s, msg := condition(c.fleet(t, f.Namespace, f.Name).Status.Conditions, v1beta1.ReadyCondition)
		return s == metav1.ConditionTrue, msg
	})
	j.mark("helm upgrade: operator rolled out and fleet Ready %s after", since(start))
	t.Logf("helm upgrade --set operator.logLevel=debug: rolled out, fleet Ready, %s", since(start))

	// Listed as v1beta1, the storage version: after helm uninstall no
	// operator serves the conversion webhook, so only v1beta1 reads work.
	policies := &v1beta1.RateLimitPolicyList{}
	if err := c.c.List(ctx, policies); err != nil {
		t.Fatal(err)
	}
	fleets := &v1beta1.LimiterFleetList{}
	if err := c.c.List(ctx, fleets); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	out, _ := c.helm(t, "uninstall", release, "--namespace", system, "--wait")
	t.Logf("helm uninstall (%s):\n%s", since(start), out)
	for _, crd := range []string{"ratelimitpolicies.ratelimit.sluice.dev", "limiterfleets.ratelimit.sluice.dev"} {
		c.kubectl(t, "get", "crd", crd)
	}
	after := &v1beta1.RateLimitPolicyList{}
	if err := c.c.List(ctx, after); err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(policies.Items) {
		t.Errorf("%d policies after helm uninstall, %d before", len(after.Items), len(policies.Items))
	}
	afterFleets := &v1beta1.LimiterFleetList{}
	if err := c.c.List(ctx, afterFleets); err != nil {
		t.Fatal(err)
	}
	if len(afterFleets.Items) != len(fleets.Items) {
		t.Errorf("%d fleets after helm uninstall, %d before", len(afterFleets.Items), len(fleets.Items))
	}
	if _, err := c.cs.AppsV1().Deployments(system).Get(ctx, dep.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the operator Deployment after helm uninstall: %v, want NotFound", err)
	}
	t.Logf("kubectl get rlp -A after helm uninstall:\n%s", c.kubectl(t, "get", "rlp", "-A"))

	// The limiters run on without an operator: a new user's first call is
	// allowed, the counted ones still deny.
	svc := fmt.Sprintf("%s.%s.svc:8081", resources.LimiterName(betaOf(f)), f.Namespace)
	var answers []rlsAnswer
	c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "rls", "-addr", svc, "-domain", loadDomain,
		"-descriptor", "keep=after-uninstall%d", "-keys", "1", "-n", "4")
	var codes []string
	for _, a := range answers {
		codes = append(codes, a.Code+a.Error+a.Reason)
	}
	if want := []string{"OK", "OK", "OK", "OVER_LIMIT"}; !slices.Equal(codes, want) {
		t.Errorf("the limiters after helm uninstall: %v, want %v", codes, want)
	}

	// The operator's leader Lease stays, as the chart's notes say. It is
	// not released: the release's RBAC is gone before the pod stops (the
	// operator logs "Failed to release lock: ... forbidden"), so it is
	// held until it expires, which the notes say too.
	lease := &coordinationv1.Lease{}
	if err := c.c.Get(ctx, client.ObjectKey{Namespace: system, Name: leaseName}, lease); err != nil {
		t.Errorf("the operator's leader Lease after helm uninstall: %v (the chart's notes say it stays)", err)
	} else {
		t.Logf("the operator's Lease after helm uninstall: holder %q, renewed %v, %ds",
			strings.TrimSpace(ptr.Deref(lease.Spec.HolderIdentity, "")), lease.Spec.RenewTime, ptr.Deref(lease.Spec.LeaseDurationSeconds, 0))
	}
	if !strings.Contains(j.notes, "stays held until it expires") {
		t.Errorf("the chart's notes don't say that helm uninstall leaves the Lease held until it expires")
	}
}
