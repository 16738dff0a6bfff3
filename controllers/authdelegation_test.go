package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// TestAuthDelegationFollowsFleets: the ClusterRoleBinding that lets
// limiters review their admin plane's callers names the ServiceAccount of
// every fleet, one that is created as soon as it exists and one that is
// deleted no longer, kept by its own controller rather than by every
// fleet's pass.
func TestAuthDelegationFollowsFleets(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns := namespace(t, "auth-delegation")
	subjects := func() ([]rbacv1.Subject, error) {
		var crb rbacv1.ClusterRoleBinding
		if err := k8s.Get(ctx, client.ObjectKey{Name: resources.LimiterAuthDelegatorBinding}, &crb); err != nil {
			return nil, err
		}
		if crb.RoleRef.Name != "system:auth-delegator" {
			return nil, fmt.Errorf("binding's role %q", crb.RoleRef.Name)
		}
		var in []rbacv1.Subject
		for _, s := range crb.Subjects {
			if s.Namespace == ns {
				in = append(in, s)
			}
		}
		return in, nil
	}
	fleets := []*v1beta1.LimiterFleet{}
	for _, name := range []string{"one", "two"} {
		f := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := k8s.Create(ctx, f); err != nil {
			t.Fatal(err)
		}
		fleets = append(fleets, f)
	}
	eventually(t, 30*time.Second, "both fleets' ServiceAccounts in the binding", func() error {
		in, err := subjects()
		if err != nil || len(in) != 2 || in[0].Name != "one-limiter" || in[1].Name != "two-limiter" {
			return fmt.Errorf("subjects of namespace %s: %+v (%v)", ns, in, err)
		}
		return nil
	})
	if err := k8s.Delete(ctx, fleets[0]); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the deleted fleet's ServiceAccount out of the binding", func() error {
		in, err := subjects()
		if err != nil || len(in) != 1 || in[0].Name != "two-limiter" {
			return fmt.Errorf("subjects of namespace %s: %+v (%v)", ns, in, err)
		}
		return nil
	})
	if err := k8s.Delete(ctx, fleets[1]); err != nil {
		t.Fatal(err)
	}
}
