package main_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/limiterwire"
)

// Attack (issue 40, 6): kubectl sluice explain and top sent the
// kubeconfig's API-server token to the limiter pod, which refused it but
// had received it: a compromised limiter collects the API tokens of the
// engineers who run the plugin. On envtest, a stand-in admin endpoint that
// records the Authorization header it receives: the plugin (the real
// binary) never sends the kubeconfig's token; what it sends is a token the
// API server authenticates for the fleet's admin audience only (and
// refuses for itself). A --token-file holding the kubeconfig's token, or
// one for another fleet, is refused before anything is sent, as is a
// kubeconfig user that is no ServiceAccount, with none named.
func TestAttackPluginSendsKubeconfigToken(t *testing.T) {
	c, adminKubeconfig := apiServer(t)
	ns := createNamespace(t, c, "plugin-token")
	cs, err := kubernetes.NewForConfig(api.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	pluginIdentities(t, c, ns)
	apiToken := saToken(t, cs, ns, "engineer")
	kubeconfig := tokenKubeconfig(t, apiToken)
	dir := t.TempDir()
	tokenFile := func(name, token string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var mu sync.Mutex
	var received []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"domain":"shop"}`))
	}))
	t.Cleanup(srv.Close)
	fleet, audience := ns+"/edge", limiterwire.FleetAdminAudience(ns, "edge")
	explain := func(flags ...string) []string {
		return append(append([]string{"explain"}, flags...), "--limiter", srv.URL, "--fleet", fleet, "--domain", "shop", "user=alice")
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantUser string // "": nothing may be sent
	}{
		{"explain as the kubeconfig's ServiceAccount", explain("--kubeconfig", kubeconfig), "engineer"},
		{"top as the kubeconfig's ServiceAccount", []string{"top", "--kubeconfig", kubeconfig, "--limiter", srv.URL, "--fleet", fleet, "-A"}, "engineer"},
		{"explain as a named ServiceAccount", explain("--kubeconfig", kubeconfig, "--service-account", ns+"/explainer"), "explainer"},
		{"a named ServiceAccount, from a certificate user", explain("--kubeconfig", adminKubeconfig, "--service-account", ns+"/explainer"), "explainer"},
		{"a certificate user, no ServiceAccount named", explain("--kubeconfig", adminKubeconfig), ""},
		{"--token-file holding the kubeconfig's token", explain("--kubeconfig", kubeconfig, "--token-file", tokenFile("api", apiToken)), ""},
		{"--token-file for another fleet", explain("--kubeconfig", kubeconfig, "--token-file",
			tokenFile("other", saToken(t, cs, ns, "engineer", limiterwire.FleetAdminAudience(ns, "other")))), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			received = nil
			mu.Unlock()
			code, _, errOut := plugin(t, tc.args...)
			mu.Lock()
			got := append([]string(nil), received...)
			mu.Unlock()
			for _, h := range got {
				if strings.Contains(h, apiToken) {
					t.Fatalf("the limiter received the kubeconfig's token")
				}
			}
			if tc.wantUser == "" {
				if code == 0 || len(got) != 0 {
					t.Errorf("exit %d (%s), %d calls sent; want a refusal before sending", code, errOut, len(got))
				}
				return
			}
			if code != 0 || len(got) != 1 {
				t.Fatalf("exit %d (%s), %d calls; want 0 and one call", code, errOut, len(got))
			}
			assertAdminToken(t, cs, strings.TrimPrefix(got[0], "Bearer "), audience, "system:serviceaccount:"+ns+":"+tc.wantUser)
		})
	}
}

// assertAdminToken: the API server authenticates token as user for
// audience, and refuses it for its own audiences.
func assertAdminToken(t *testing.T, cs kubernetes.Interface, token, audience, user string) {
	t.Helper()
	for _, auds := range [][]string{{audience}, nil} {
		r, err := cs.AuthenticationV1().TokenReviews().Create(t.Context(), &authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: token, Audiences: auds}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := auds != nil
		if r.Status.Authenticated != want || (want && (r.Status.User.Username != user || len(r.Status.Audiences) != 1)) {
			t.Errorf("the token sent, reviewed for %q: authenticated %v as %q for %q (%s); want %v as %s",
				auds, r.Status.Authenticated, r.Status.User.Username, r.Status.Audiences, r.Status.Error, want, user)
		}
	}
}

// pluginIdentities creates, in ns, the ServiceAccounts engineer (who may
// mint tokens of itself and of explainer) and explainer.
func pluginIdentities(t *testing.T, c client.Client, ns string) {
	t.Helper()
	engineer := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "engineer"}
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "engineer"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "explainer"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mint"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""},
			Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"engineer", "explainer"}, Verbs: []string{"create"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mint"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "mint"}, Subjects: []rbacv1.Subject{engineer}},
	} {
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
}
