package controllers_test

import (
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// TestAttackTenantLeaseEntryRefusesAnotherTenantsRequests: A counts per
// user_id in a domain the fleet shares with B. B, who may edit only his
// namespace, adds a Concurrency policy to the domain with
// concurrency.leaseEntry: user_id. A lease entry applies to the whole
// domain, so every request carrying user_id would be refused as a
// malformed lease. B's policy is not accepted (Conflict, naming A's), and
// A's requests are decided by A's limit on a real limiter.
func TestAttackTenantLeaseEntryRefusesAnotherTenantsRequests(t *testing.T) {
	tn := newTenants(t, "leaseentry")
	shared := "leaseentry-shared-api"
	updateFleet(t, client.ObjectKeyFromObject(tn.fleet), func(fleet *v1alpha1.LimiterFleet) {
		fleet.Spec.Domains = append(fleet.Spec.Domains, v1alpha1.FleetDomain{Name: shared,
			AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSelector),
				Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{tn.nsA, tn.nsB}}}}}})
	})
	perUser := tenantPolicy(tn.nsA, "per-user", shared, 3, "user_id")
	create(t, tn.alice, perUser)
	waitAfterCreation(t, tn.alice, perUser)
	lease := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.nsB, Name: "in-flight"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: shared, Algorithm: ptr.To(v1alpha1.Concurrency),
			Descriptors: []v1alpha1.Descriptor{{Key: "tenant", Value: ptr.To("b")}},
			Concurrency: &v1alpha1.ConcurrencyLimit{MaxInFlight: 5, LeaseEntry: ptr.To("user_id")}},
	}
	create(t, tn.bob, lease)

	got := waitPolicy(t, tn.nsB, lease.Name, v1beta1.AcceptedCondition, metav1.ConditionFalse, v1beta1.ConflictReason)
	msg := condition(got.Status.Conditions, v1beta1.AcceptedCondition).Message
	for _, want := range []string{"conflicts with the older policy " + tn.nsA + "/per-user", `its lease entry "user_id"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("B's Accepted message %q does not say %q", msg, want)
		}
	}
	waitPolicy(t, tn.nsA, perUser.Name, v1beta1.AcceptedCondition, metav1.ConditionTrue, v1beta1.AcceptedReason)
	tn.settled(t, 1)
	for i := range 3 {
		if code := tn.pod.check(t, shared, "user_id", "kim"); code != http.StatusOK {
			t.Fatalf("request %d of kim answered %d, want 200: A's limit is 3 an hour", i+1, code)
		}
	}
	if code := tn.pod.check(t, shared, "user_id", "kim"); code != http.StatusTooManyRequests {
		t.Fatalf("request 4 of kim answered %d, want 429: A's limit is 3 an hour", code)
	}
}
