package main_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/controllers/observe"
)

// Attack (issue 40, 10): one admin audience for every fleet lets a
// compromised limiter replay the operator's token to every other fleet's
// admin port. Each fleet's limiters require their own audience
// (limiterwire.FleetAdminAudience, as the operator renders
// --admin-token-audience), and the operator mints a token per fleet
// (observe.TokenMinter, TokenRequest for its own ServiceAccount): on
// envtest with TokenReview, two real limiters of fleets a and b; the
// token minted for a is 200 at a and 401 at b, and the one audience of
// old is 401 at both.
func TestAttackAdminTokenReplayedToOtherFleet(t *testing.T) {
	c, _ := apiServer(t)
	ctx := t.Context()
	ns := createNamespace(t, c, "admin-fleet-audience")
	cs, err := kubernetes.NewForConfig(api.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	adminIdentities(t, c, ns)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(5))
	kubeconfig := tokenKubeconfig(t, saToken(t, cs, ns, "limiter"))
	limiters := map[string]*process{}
	for _, fleet := range []string{"a", "b"} {
		limiters[fleet] = startLimiter(t, "--policies", path, "--admin-auth", "kubernetes", "--kubeconfig", kubeconfig,
			"--admin-token-audience", limiterwire.FleetAdminAudience(ns, fleet))
	}
	limiters["b"].expectLimit(t, "alice", 5)

	minter := &observe.TokenMinter{ServiceAccounts: cs.CoreV1().ServiceAccounts(ns), Name: "sluice-operator"}
	tokenA, err := minter.Token(ctx, types.NamespacedName{Namespace: ns, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := minter.Token(ctx, types.NamespacedName{Namespace: ns, Name: "a"}); err != nil || again != tokenA {
		t.Errorf("a second token for fleet a: %v; want the kept one (minted again: %v)", err, again != tokenA)
	}
	tokenB, err := minter.Token(ctx, types.NamespacedName{Namespace: ns, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	shared := saToken(t, cs, ns, "sluice-operator", limiterwire.AdminAudience)
	for _, tc := range []struct {
		which, token, fleet string
		want                int
	}{
		{"fleet a's", tokenA, "a", http.StatusOK},
		{"fleet a's, replayed", tokenA, "b", http.StatusUnauthorized},
		{"fleet b's", tokenB, "b", http.StatusOK},
		{"fleet b's, replayed", tokenB, "a", http.StatusUnauthorized},
		{"the one audience of old", shared, "a", http.StatusUnauthorized},
		{"the one audience of old", shared, "b", http.StatusUnauthorized},
	} {
		code, body := adminCall(t, limiters[tc.fleet].adminURL+limiterwire.StatsPath, tc.token)
		if code != tc.want {
			t.Errorf("%s token at fleet %s's limiter: GET %s answered %d %q, want %d", tc.which, tc.fleet, limiterwire.StatsPath, code, body, tc.want)
		}
	}
}

// adminIdentities creates, in ns, the ServiceAccount limiter (allowed to
// review tokens) and sluice-operator (allowed /v1/admin/*).
func adminIdentities(t *testing.T, c client.Client, ns string) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-admin-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/v1/admin/*"}, Verbs: []string{"get"}}}}
	for _, obj := range []client.Object{role,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limiter"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sluice-operator"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-limiter"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "limiter"}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-operator"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "sluice-operator"}}},
	} {
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		if obj.GetNamespace() == "" {
			t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
		}
	}
}

// adminCall GETs url with a bearer token and returns the status and body.
func adminCall(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
