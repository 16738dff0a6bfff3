package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// The attacks of issue 16 on domain ownership, by two tenants who may each
// only edit their own namespace, with the chart's aggregated edit role, as
// the API server authorizes them (impersonation): B squats on A's domain,
// or denies all of it, and A's policy and the decisions of A's domain,
// checked against a real limiter process, do not change; B reads why his
// policies are not accepted.

// tenants is one attack's world: a platform fleet that owns two domains,
// one per tenant namespace, a limiter process behind it, and a client for
// each tenant.
type tenants struct {
	fleet            *v1alpha1.LimiterFleet
	pod              *limiterProc
	nsA, nsB         string
	domainA, domainB string
	alice, bob       client.Client
}

// newTenants creates the namespaces (labelled team=<prefix>-a and -b), the
// fleet in <prefix>-sys that allows domainA to team a and domainB to team
// b, one limiter pod, and the users <prefix>-alice and <prefix>-bob bound
// to the edit role in their own namespace only.
func newTenants(t *testing.T, prefix string) *tenants {
	t.Helper()
	needSuite(t)
	ctx := context.Background()
	chartUserRoles(t)
	tn := &tenants{nsA: prefix + "-a", nsB: prefix + "-b", domainA: prefix + "-payments-api", domainB: prefix + "-b-api"}
	for _, ns := range []string{tn.nsA, tn.nsB} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": ns}}}
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	selector := func(ns string) *v1alpha1.AllowedNamespaces {
		return &v1alpha1.AllowedNamespaces{From: ptr.To(v1alpha1.NamespacesFromSelector),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": ns}}}
	}
	tn.fleet = &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace(t, prefix+"-sys"), Name: "shared"},
		Spec: v1alpha1.LimiterFleetSpec{Replicas: ptr.To(int32(1)), Domains: []v1alpha1.FleetDomain{
			{Name: tn.domainA, AllowedNamespaces: selector(tn.nsA)},
			{Name: tn.domainB, AllowedNamespaces: selector(tn.nsB)},
		}},
	}
	if err := k8s.Create(ctx, tn.fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, tn.fleet) })
	tn.pod = fleetPods(t, tn.fleet, 1)[0]
	tn.alice = tenant(t, prefix+"-alice", tn.nsA)
	tn.bob = tenant(t, prefix+"-bob", tn.nsB)
	return tn
}

// tenant binds user to the edit ClusterRole in ns and returns a client
// that acts as that user.
func tenant(t *testing.T, user, ns string) client.Client {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if err := k8s.Create(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	cl, err := client.New(c, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

var chartRolesOnce sync.Once

// chartUserRoles creates the chart's user-facing ClusterRoles
// (templates/user-roles.yaml, rendered by helm) and does the job of
// kube-controller-manager's clusterrole-aggregation controller, which
// envtest doesn't run: view, edit and admin get the rules of the
// ClusterRoles their aggregationRules select.
func chartUserRoles(t *testing.T) {
	t.Helper()
	var err error
	chartRolesOnce.Do(func() { err = createChartUserRoles() })
	if err != nil {
		t.Fatalf("the chart's user roles: %v", err)
	}
}

func createChartUserRoles() error {
	ctx := context.Background()
	helm := "helm"
	if _, err := exec.LookPath(helm); err != nil {
		helm = filepath.Join("..", "bin", "helm")
	}
	out, err := exec.Command(helm, "template", "sluice", filepath.Join("..", "charts", "sluice"),
		"--show-only", "templates/user-roles.yaml").Output()
	if err != nil {
		return fmt.Errorf("helm template: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	n := 0
	for {
		role := &rbacv1.ClusterRole{}
		if err := dec.Decode(role); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		if role.Name == "" {
			continue
		}
		if err := k8s.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no ClusterRole in the chart's user-roles.yaml")
	}
	var all rbacv1.ClusterRoleList
	if err := k8s.List(ctx, &all); err != nil {
		return err
	}
	for i := range all.Items {
		agg := &all.Items[i]
		if agg.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range agg.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return err
			}
			for _, cr := range all.Items {
				if cr.Name == agg.Name || !s.Matches(labels.Set(cr.Labels)) {
					continue
				}
				for _, r := range cr.Rules {
					if !slicesContainsRule(rules, r) {
						rules = append(rules, r)
					}
				}
			}
		}
		agg.Rules = rules
		if err := k8s.Update(ctx, agg); err != nil {
			return err
		}
	}
	return nil
}

func slicesContainsRule(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) bool {
	for _, x := range rules {
		if reflect.DeepEqual(x, r) {
			return true
		}
	}
	return false
}

// tenantPolicy is a TokenBucket policy of limit per hour on domain, keyed
// by the descriptor keys.
func tenantPolicy(ns, name, domain string, limit int64, keys ...string) *v1alpha1.RateLimitPolicy {
	p := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: domain,
			Rate: v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: time.Hour}}},
	}
	for _, k := range keys {
		p.Spec.Descriptors = append(p.Spec.Descriptors, v1alpha1.Descriptor{Key: k})
	}
	return p
}

// create makes obj as the tenant whose client c is.
func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s/%s as a tenant: %v", obj.GetNamespace(), obj.GetName(), err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
}

// seesNotAllowed waits until the tenant whose client c is reads, on his
// own policy, Accepted=False with reason DomainNotAllowed and a message
// that names the domain, his namespace and what would allow it, and
// Enforced=False.
func seesNotAllowed(t *testing.T, c client.Client, p *v1alpha1.RateLimitPolicy, fleet string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s/%s sees why it is not accepted", p.Namespace, p.Name), func() error {
		got := &v1alpha1.RateLimitPolicy{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		acc := condition(got.Status.Conditions, v1beta1.AcceptedCondition)
		enf := condition(got.Status.Conditions, v1beta1.EnforcedCondition)
		switch {
		case acc == nil || enf == nil || acc.ObservedGeneration != got.Generation:
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		case acc.Status != metav1.ConditionFalse || acc.Reason != v1beta1.DomainNotAllowedReason:
			return fmt.Errorf("Accepted=%s %s: %s", acc.Status, acc.Reason, acc.Message)
		case enf.Status != metav1.ConditionFalse || enf.Reason != v1beta1.NotAcceptedReason:
			return fmt.Errorf("Enforced=%s %s", enf.Status, enf.Reason)
		}
		for _, sub := range []string{fmt.Sprintf("domain %q", p.Spec.Domain), fmt.Sprintf("namespace %q", p.Namespace), fleet, "allowedNamespaces"} {
			if !strings.Contains(acc.Message, sub) {
				return fmt.Errorf("the message %q lacks %q", acc.Message, sub)
			}
		}
		return nil
	})
}

// settled waits until the fleet's snapshot holds policies policies and
// its limiter has loaded it.
func (tn *tenants) settled(t *testing.T, policies int32) {
	t.Helper()
	eventually(t, 30*time.Second, "the fleet's limiter on its latest snapshot", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(tn.fleet), f); err != nil {
			return err
		}
		if f.Status.Snapshot == nil || f.Status.Snapshot.Policies != policies {
			return fmt.Errorf("snapshot %+v, want %d policies", f.Status.Snapshot, policies)
		}
		if v := tn.pod.loaded(t); v != f.Status.Snapshot.Version {
			return fmt.Errorf("the limiter has %q, the fleet wrote %q", v, f.Status.Snapshot.Version)
		}
		return nil
	})
}

// expectOwnLimit checks A's domain against the limiter: each of users gets
// exactly limit requests, from one client address, then 429.
func (tn *tenants) expectOwnLimit(t *testing.T, limit int, users ...string) {
	t.Helper()
	for _, u := range users {
		for i := range limit {
			if code := tn.pod.check(t, tn.domainA, "user_id", u, "remote_address", "203.0.113.7"); code != http.StatusOK {
				t.Fatalf("request %d of %s in A's domain answered %d, want 200: A's limit is %d", i+1, u, code, limit)
			}
		}
		if code := tn.pod.check(t, tn.domainA, "user_id", u, "remote_address", "203.0.113.7"); code != http.StatusTooManyRequests {
			t.Fatalf("request %d of %s in A's domain answered %d, want 429: A's limit is %d", limit+1, u, code, limit)
		}
	}
}

// bobCannotWidenTheFleet: the fleet, where ownership is declared, is not
// B's to change.
func (tn *tenants) bobCannotWidenTheFleet(t *testing.T) {
	t.Helper()
	patch := client.RawPatch("application/merge-patch+json",
		fmt.Appendf(nil, `{"spec":{"domains":[{"name":%q,"allowedNamespaces":{"from":"All"}}]}}`, tn.domainA))
	err := tn.bob.Patch(context.Background(), &v1alpha1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: tn.fleet.Namespace, Name: tn.fleet.Name}}, patch)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("B patched the fleet's domains: %v", err)
	}
}

// waitAfterCreation waits until the second after obj's creation, so that
// what is created next is younger (creation timestamps have whole seconds).
func waitAfterCreation(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	got := &v1alpha1.RateLimitPolicy{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(got.CreationTimestamp.Add(1100 * time.Millisecond))) // timestamps have whole seconds
}

// TestAttackTenantSquatsAnotherTenantsDomain: B, who may edit only his
// namespace, creates A's policy (same domain and descriptors, a limit of
// a million) before A does. A's policy is still accepted and enforced,
// A's limit is what the limiter decides, and B reads why his is not.
func TestAttackTenantSquatsAnotherTenantsDomain(t *testing.T) {
	tn := newTenants(t, "squat")
	ctx := context.Background()
	squat := tenantPolicy(tn.nsB, "charges-per-user", tn.domainA, 1_000_000, "user_id")
	create(t, tn.bob, squat)
	own := tenantPolicy(tn.nsB, "b-per-user", tn.domainB, 10, "user_id")
	create(t, tn.bob, own)
	waitAfterCreation(t, tn.bob, squat)
	charges := tenantPolicy(tn.nsA, "charges-per-user", tn.domainA, 3, "user_id")
	create(t, tn.alice, charges)

	waitPolicy(t, tn.nsA, charges.Name, v1beta1.AcceptedCondition, metav1.ConditionTrue, v1beta1.AcceptedReason)
	waitPolicy(t, tn.nsA, charges.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	seesNotAllowed(t, tn.bob, squat, tn.fleet.Namespace+"/"+tn.fleet.Name)
	// B's own domain is his: the wall is not a lockout.
	waitPolicy(t, tn.nsB, own.Name, v1beta1.AcceptedCondition, metav1.ConditionTrue, v1beta1.AcceptedReason)
	tn.settled(t, 2)
	tn.expectOwnLimit(t, 3, "kim", "lee")
	tn.bobCannotWidenTheFleet(t)
	if err := tn.bob.Get(ctx, client.ObjectKeyFromObject(charges), &v1alpha1.RateLimitPolicy{}); !apierrors.IsForbidden(err) {
		t.Errorf("B reads A's policy: %v", err)
	}
}

// TestAttackTenantDeniesAllOfAnotherTenantsDomain: B adds to A's domain a
// policy on remote_address with a limit of 1 per 720h, which would deny
// every request of A's domain after the first from each address. It is
// never compiled: A's decisions stay A's limit alone, and B reads why.
func TestAttackTenantDeniesAllOfAnotherTenantsDomain(t *testing.T) {
	tn := newTenants(t, "denyall")
	charges := tenantPolicy(tn.nsA, "charges-per-user", tn.domainA, 3, "user_id")
	create(t, tn.alice, charges)
	waitPolicy(t, tn.nsA, charges.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)

	denyAll := tenantPolicy(tn.nsB, "deny-all", tn.domainA, 1, "remote_address")
	denyAll.Spec.Rate.Period = metav1.Duration{Duration: 720 * time.Hour}
	create(t, tn.bob, denyAll)
	seesNotAllowed(t, tn.bob, denyAll, tn.fleet.Namespace+"/"+tn.fleet.Name)
	waitPolicy(t, tn.nsA, charges.Name, v1beta1.AcceptedCondition, metav1.ConditionTrue, v1beta1.AcceptedReason)
	tn.settled(t, 1)
	// Many users from one address: each gets A's limit.
	tn.expectOwnLimit(t, 3, "ann", "bea", "cal")
	tn.bobCannotWidenTheFleet(t)
}
