package main_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// Attack (issue 16, 2): any pod that reaches a limiter's HTTP port reads
// every policy's counts and hottest values on /v1/admin/stats, and
// /metrics. Those are the admin plane now, on their own listener: the data
// port answers 404 there.
func TestAttackReadAdminStatsOnTheDataPort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(5))
	p := startLimiter(t, "--policies", path, "--top-descriptors", "3")
	p.expectLimit(t, "alice", 5)
	for _, path := range []string{limiterwire.StatsPath, limiterwire.SnapshotPath, "/metrics", "/v1/admin/anything"} {
		if code, body := p.get(t, path); code != http.StatusNotFound || strings.Contains(body, "alice") || strings.Contains(body, "per-user") {
			t.Errorf("data port GET %s: %d %s, want 404 and nothing of the admin plane", path, code, body)
		}
	}
	for _, path := range []string{limiterwire.StatsPath, limiterwire.SnapshotPath, "/metrics"} {
		if code, body := p.adminGet(t, path); code != http.StatusOK || !strings.Contains(body, "per-user") {
			t.Errorf("admin port GET %s: %d %s, want 200 naming the policy", path, code, body)
		}
	}
	// The data plane is all there.
	if code, _ := p.get(t, "/v1/ratelimit/status?domain=shop&user=alice"); code != http.StatusOK && code != http.StatusTooManyRequests {
		t.Errorf("status peek on the data port: %d", code)
	}
}

// Attack (issue 16, 2): on Kubernetes, anyone who reaches the admin port
// reads it. With --admin-auth=kubernetes, the limiter asks the API server
// about each caller: no token is 401, a ServiceAccount without the
// permission (an app team's, with edit in its namespace) is 403, the
// operator's ServiceAccount, with the generated ClusterRole of
// config/rbac/role.yaml, is 200, and a metrics reader gets /metrics only.
// The limiter itself runs as a ServiceAccount bound to
// system:auth-delegator, as the operator binds every fleet's.
func TestAttackReadAdminPlaneWithoutPermission(t *testing.T) {
	c, _ := apiServer(t)
	ctx := t.Context()
	ns := createNamespace(t, c, "admin-auth")
	cs, err := kubernetes.NewForConfig(api.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// tokenOf creates ServiceAccount name and returns a token of it, for
	// audiences (none: the API server's).
	tokenOf := func(name string, audiences ...string) string {
		t.Helper()
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
		return saToken(t, cs, ns, name, audiences...)
	}
	bind := func(name, role string, sa string) {
		t.Helper()
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}}
		if err := c.Create(ctx, crb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, crb) })
	}

	// The operator's ClusterRole, as controller-gen generates it.
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var operatorRole rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &operatorRole); err != nil {
		t.Fatal(err)
	}
	operatorRole.Name = ns + "-operator"
	metricsRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	for _, r := range []*rbacv1.ClusterRole{&operatorRole, metricsRole} {
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, r) })
	}

	limiterToken := tokenOf("limiter")
	bind("limiter", "system:auth-delegator", "limiter")
	operator := tokenOf("sluice-operator", limiterwire.AdminAudience)
	bind("operator", operatorRole.Name, "sluice-operator")
	prometheus := tokenOf("prometheus")
	bind("prometheus", metricsRole.Name, "prometheus")
	tenant := tokenOf("tenant")
	tenantForLimiters := saToken(t, cs, ns, "tenant", limiterwire.AdminAudience)
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "tenant"}}}); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(5))
	p := startLimiter(t, "--policies", path, "--admin-auth", "kubernetes",
		"--kubeconfig", tokenKubeconfig(t, limiterToken))
	p.expectLimit(t, "alice", 5)

	call := func(token, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.adminURL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		who, token, path string
		want             int
	}{
		{"nobody", "", limiterwire.StatsPath, http.StatusUnauthorized},
		{"nobody", "", "/metrics", http.StatusUnauthorized},
		{"a made-up token", "not-a-token", limiterwire.StatsPath, http.StatusUnauthorized},
		// Tokens for the API server are not for the admin endpoints.
		{"an app team's ServiceAccount", tenant, limiterwire.StatsPath, http.StatusUnauthorized},
		{"an app team's ServiceAccount", tenant, limiterwire.SnapshotPath, http.StatusUnauthorized},
		{"an app team's ServiceAccount, for the limiters' audience", tenantForLimiters, limiterwire.StatsPath, http.StatusForbidden},
		{"an app team's ServiceAccount, for the limiters' audience", tenantForLimiters, limiterwire.SnapshotPath, http.StatusForbidden},
		{"an app team's ServiceAccount", tenant, "/metrics", http.StatusForbidden},
		{"the metrics reader", prometheus, limiterwire.StatsPath, http.StatusUnauthorized},
		{"the metrics reader", prometheus, "/metrics", http.StatusOK},
		{"the operator", operator, limiterwire.StatsPath, http.StatusOK},
		{"the operator", operator, limiterwire.SnapshotPath, http.StatusOK},
		// A path reviewed as the operator's but routed to /metrics.
		{"the operator", operator, "/v1/admin/../../metrics", http.StatusNotFound},
		{"the operator", operator, "/v1/admin//stats", http.StatusNotFound},
	} {
		code, body := call(tc.token, tc.path)
		if code != tc.want || (code != http.StatusOK && strings.Contains(body, "per-user")) {
			t.Errorf("%s GET %s: %d %q, want %d", tc.who, tc.path, code, body, tc.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "per-user") {
			t.Errorf("%s GET %s: %s, want the policy in it", tc.who, tc.path, body)
		}
	}
	// The operator's answers come from the cache now; the counts show every
	// kind of call.
	code, m := call(prometheus, "/metrics")
	for _, want := range []string{`sluice_admin_requests_total{result="unauthenticated"} 6`, `sluice_admin_requests_total{result="forbidden"} 5`} {
		if code != http.StatusOK || !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Attack (issue 24, 3): the operator's token is one the API server takes.
// A limiter that accepts such tokens makes every caller of its admin plane
// hand it a credential it could replay to the API server as that caller
// (the operator's can create Deployments and read Secrets). The limiter
// requires tokens issued for its own audience, limiterwire.AdminAudience,
// which the API server refuses: the operator's ServiceAccount's ordinary
// token, and one for another audience, are 401 on /v1/admin/*; a token for
// sluice-limiter-admin is 200.
func TestAttackAdminTokenForTheAPIServer(t *testing.T) {
	c, _ := apiServer(t)
	ctx := t.Context()
	ns := createNamespace(t, c, "admin-audience")
	cs, err := kubernetes.NewForConfig(api.env.Config)
	if err != nil {
		t.Fatal(err)
	}
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
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		if obj.GetNamespace() == "" {
			t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
		}
	}
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, policy(5))
	p := startLimiter(t, "--policies", path, "--admin-auth", "kubernetes",
		"--kubeconfig", tokenKubeconfig(t, saToken(t, cs, ns, "limiter")))
	p.expectLimit(t, "alice", 5)

	for _, tc := range []struct {
		which string
		token string
		want  int
	}{
		{"the API server's own", saToken(t, cs, ns, "sluice-operator"), http.StatusUnauthorized},
		{"another audience's", saToken(t, cs, ns, "sluice-operator", "vault"), http.StatusUnauthorized},
		{limiterwire.AdminAudience + "'s", saToken(t, cs, ns, "sluice-operator", limiterwire.AdminAudience), http.StatusOK},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.adminURL+limiterwire.StatsPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tc.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("the operator's token for %s audience: GET %s answered %d %q, want %d",
				tc.which, limiterwire.StatsPath, resp.StatusCode, body, tc.want)
		}
	}
}

// saToken returns a token of ServiceAccount ns/name for audiences (none:
// the API server's own), valid for an hour.
func saToken(t *testing.T, cs kubernetes.Interface, ns, name string, audiences ...string) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600)), Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// tokenKubeconfig writes a kubeconfig for the envtest API server that
// authenticates with token only.
func tokenKubeconfig(t *testing.T, token string) string {
	t.Helper()
	cfg := api.env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "sa"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Attack (issue 16, 4): a client that reuses one Idempotency-Key gets
// unlimited requests for 24 hours, whatever it sends. Against a real
// limiter on the memory store and on a real redis-server: one key sent 50
// times against a limit of 5 is admitted 5 times plus the bounded replays
// of its first request, and a different request (another cost) with a used
// key is decided afresh.
func TestAttackIdempotencyKeyReplaysWithoutEnd(t *testing.T) {
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	// An hour's window: no refill while the test runs, however slowly.
	writeAtomic(t, path, strings.Replace(strings.Replace(policy(5), "TokenBucket", "FixedWindow", 1), "period: 1m", "period: 1h", 1))
	for _, st := range []string{"memory", "redis://" + rs.Addr} {
		t.Run(strings.Split(st, ":")[0], func(t *testing.T) {
			p := startLimiter(t, "--policies", path, "--store", st, "--redis-timeout", "2s", "--idempotency-max-replays", "3")
			check := func(user, cost string) (int, bool) {
				t.Helper()
				body := `{"domain":"shop","hits_addend":` + cost + `,"descriptors":[{"entries":[{"key":"user","value":"` + user + `"}]}]}`
				code, h, b := p.post(t, "/v1/ratelimit/check", body, "Idempotency-Key", "same-key")
				if code != http.StatusOK && code != http.StatusTooManyRequests {
					t.Fatalf("check: %d %s", code, b)
				}
				return code, h.Get("Idempotent-Replayed") == "true"
			}
			admitted, replayed := 0, 0
			for range 50 {
				code, r := check("eve", "1")
				if code == http.StatusOK {
					admitted++
				}
				if r {
					replayed++
				}
			}
			if admitted != 5+3 || replayed != 3 {
				t.Errorf("one key sent 50 times against 5 a minute: %d admitted, %d replayed; want 8 and 3", admitted, replayed)
			}
			// Another request with a used key is its own request.
			if code, r := check("fay", "1"); code != http.StatusOK || r {
				t.Fatalf("fay's first request: %d replayed=%v", code, r)
			}
			if code, r := check("fay", "4"); code != http.StatusOK || r {
				t.Errorf("fay's key with another cost: %d replayed=%v, want decided afresh", code, r)
			}
			if code, r := check("fay", "1"); code != http.StatusOK || !r {
				t.Errorf("fay's first request again: %d replayed=%v, want its decision replayed", code, r)
			}
			if code, _ := p.check(t, "fay"); code != http.StatusTooManyRequests {
				t.Errorf("fay after spending 1 + 4 units of 5: %d, want 429", code)
			}
		})
	}
}

// Attack (issue 16, 2): any caller of the data plane locks a user out by
// sending one check with hits_addend equal to what remains (up to 1e6).
// A policy's maxCost caps what one request may spend: above it, the check
// is refused, a denial (HTTP 429, RLS OVER_LIMIT) naming the policy and the
// cap, and spends nothing. Without maxCost the cap is the capacity.
func TestAttackLockOutWithHitsAddend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 5, period: 1h}
  maxCost: 1
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-tenant, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: tenant}]
  algorithm: TokenBucket
  rate: {limit: 5, period: 1h}
  burst: 10
`)
	p := startLimiter(t, "--policies", path)
	attack := func(key, value string, cost int) (int, string) {
		t.Helper()
		body := fmt.Sprintf(`{"domain":"shop","hits_addend":%d,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, cost, key, value)
		code, _, b := p.post(t, "/v1/ratelimit/check", body)
		return code, b
	}
	for _, tc := range []struct {
		key, value string
		cost       int
		want       string
	}{
		{"user", "alice", 5, "descriptors[0] costs 5, above the maximum cost of 1 of policy shop/per-user (spec.limit.rate.cost.max)"},
		{"user", "alice", 1_000_000, "descriptors[0] costs 1000000, above the maximum cost of 1 of policy shop/per-user"},
		// No maxCost: the capacity, burst 10, caps it.
		{"tenant", "acme", 11, "descriptors[0] costs 11, above the maximum cost of 10 of policy shop/per-tenant"},
	} {
		if code, body := attack(tc.key, tc.value, tc.cost); code != http.StatusTooManyRequests || !strings.Contains(body, tc.want) {
			t.Errorf("%s=%s with hits_addend %d: %d %s, want 429 %q", tc.key, tc.value, tc.cost, code, body, tc.want)
		}
	}
	// Over gRPC, the same.
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: 5,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT ||
		!strings.Contains(fmt.Sprint(resp.GetDynamicMetadata().AsMap()["reason"]), "maximum cost of 1 of policy shop/per-user") {
		t.Errorf("RLS hits_addend 5 for alice: %v %v, want OVER_LIMIT naming the cap", resp, err)
	}
	// Nothing was spent: alice has her 5, acme its 10.
	for i := range 5 {
		if code, body := attack("user", "alice", 1); code != http.StatusOK {
			t.Fatalf("alice's request %d after the attacks: %d %s", i+1, code, body)
		}
	}
	if code, body := attack("tenant", "acme", 10); code != http.StatusOK {
		t.Errorf("acme's 10 after the attacks: %d %s", code, body)
	}
}

// forwardAuthCall calls a limiter's forward-auth endpoint of domain with
// headers, as nginx or Traefik do, and returns the status.
func forwardAuthCall(t *testing.T, p *process, domain string, headers ...string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.http+"/v1/forward-auth/"+domain, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Attack (issue 16, 5): forward-auth matched the raw path, so /%6cogin,
// //login and /login/ dodged a policy on path /login and made fresh
// counters. Forward-auth normalizes the path first (NormalizePath): each
// spelling spends the /login counter of its client.
func TestAttackForwardAuthPathBypass(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: edge, namespace: web}
spec:
  forwardAuth:
    - domain: web
      descriptors:
        - {key: path, from: Path}
        - {key: remote_address, from: ClientIP}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: logins-per-client, namespace: web}
spec:
  domain: web
  descriptors: [{key: path, value: /login}, {key: remote_address}]
  algorithm: FixedWindow
  rate: {limit: 3, period: 1h}
`)
	p := startLimiter(t, "--policies", path, "--trusted-proxies", "127.0.0.1")
	for i, bypass := range []string{"/%6cogin", "//login", "/login/", "/static/../login", "/%2E%2E/login?next=/"} {
		t.Run(bypass, func(t *testing.T) {
			client := fmt.Sprintf("198.51.100.%d", i+1)
			for n := range 3 {
				if code := forwardAuthCall(t, p, "web", "X-Forwarded-Uri", "/login", "X-Forwarded-For", client); code != http.StatusOK {
					t.Fatalf("login %d of 3: %d", n+1, code)
				}
			}
			if code := forwardAuthCall(t, p, "web", "X-Forwarded-Uri", bypass, "X-Forwarded-For", client); code != http.StatusTooManyRequests {
				t.Errorf("%s after 3 logins of 3: %d, want 429 (the /login counter)", bypass, code)
			}
		})
	}
	// The other way round: the bypass spellings spend /login's units.
	client := "198.51.100.99"
	for _, bypass := range []string{"/%6cogin", "//login", "/login/"} {
		if code := forwardAuthCall(t, p, "web", "X-Forwarded-Uri", bypass, "X-Forwarded-For", client); code != http.StatusOK {
			t.Fatalf("%s: %d", bypass, code)
		}
	}
	if code := forwardAuthCall(t, p, "web", "X-Forwarded-Uri", "/login", "X-Forwarded-For", client); code != http.StatusTooManyRequests {
		t.Errorf("/login after three spellings of it: %d, want 429", code)
	}
}

// Attack (issue 16, 5): with onMissing Allow, a request that left out one
// entry's value skipped the whole descriptor: in the shipped gateway
// sample, leaving out X-Api-Key also skipped the per-client limit. Now
// onMissing applies per entry: the missing api_key is left out, and the
// per-client limit (GCRA, burst 100) still applies.
func TestAttackForwardAuthMissingHeaderSkipsOtherLimits(t *testing.T) {
	p := startLimiter(t, "--policies", gatewayPolicies, "--trusted-proxies", "127.0.0.1")
	denied := 0
	for range 150 {
		code := forwardAuthCall(t, p, "gateway", "X-Original-URI", "/orders", "X-Forwarded-For", "203.0.113.50")
		switch code {
		case http.StatusOK:
		case http.StatusForbidden: // the sample's denyStatus
			denied++
		default:
			t.Fatalf("forward-auth without X-Api-Key: %d", code)
		}
	}
	if denied == 0 {
		t.Errorf("150 calls without X-Api-Key from one client: none denied; requests-per-client (burst 100) must still apply")
	}
	// The missing header is still counted, as allowed.
	want := `sluice_forward_auth_missing_total{domain="gateway",result="allowed"}`
	if _, m := p.adminGet(t, "/metrics"); !strings.Contains(m, want) {
		t.Errorf("metrics lack %s", want)
	}
}

// A forward-auth mapping that builds the limiter's idempotency entry would
// let callers pick their own idempotency key with a header (issue 16, 4):
// forward-auth refuses the mapping's calls.
func TestAttackForwardAuthIdempotencyKeyFromHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: LimiterFleet
metadata: {name: edge, namespace: web}
spec:
  forwardAuth:
    - domain: web
      descriptors:
        - {key: user, from: Header, header: X-User}
        - {key: idempotency_key, from: Header, header: X-Request-Id}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: web}
spec:
  domain: web
  descriptors: [{key: user}]
  algorithm: FixedWindow
  rate: {limit: 1, period: 1h}
`)
	p := startLimiter(t, "--policies", path)
	for range 3 {
		if code := forwardAuthCall(t, p, "web", "X-User", "mallory", "X-Request-Id", "same"); code != http.StatusInternalServerError {
			t.Fatalf("a mapping that builds idempotency_key: %d, want 500 (refused)", code)
		}
	}
	if !strings.Contains(p.log.String(), "builds the idempotency descriptor entry") {
		t.Errorf("no error logged for the mapping:\n%s", p.log)
	}
}

// Attack (issue 16, 6): the hottest values were an unsalted 48-bit SHA-256,
// so anyone who read them recovered every IPv4 address by hashing all of
// them; truncation kept up to 64 bytes, whole API keys. Now a value shows
// as 64 bits of its HMAC-SHA-256 under the fleet's key (the file of
// $SLUICE_TOPK_KEY_FILE): pods with one key show one value alike, and
// without the key the digits match no hash of the value. Truncation stops
// at 16 bytes.
func TestAttackRecoverHottestValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeAtomic(t, path, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: remote_address}]
  algorithm: FixedWindow
  rate: {limit: 100, period: 1h}
`)
	dir := t.TempDir()
	fleetKey, otherKey := filepath.Join(dir, "fleet"), filepath.Join(dir, "other")
	for f, key := range map[string]string{fleetKey: "0123456789abcdef0123456789abcdef", otherKey: "another fleet's key, 32 bytes..."} {
		if err := os.WriteFile(f, []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const ip = "10.1.2.3"
	// hottest sends traffic for ip to a limiter and returns the value its
	// stats show for it, once an interval (1s) has completed.
	hottest := func(p *process) string {
		t.Helper()
		var value string
		eventually(t, "a complete interval of hottest values", func() (bool, string) {
			body := `{"domain":"shop","descriptors":[{"entries":[{"key":"remote_address","value":"` + ip + `"}]}]}`
			if code, _, b := p.post(t, "/v1/ratelimit/check", body); code != http.StatusOK {
				t.Fatalf("check: %d %s", code, b)
			}
			_, stats := p.adminGet(t, limiterwire.StatsPath)
			var s limiterwire.Stats
			if err := json.Unmarshal([]byte(stats), &s); err != nil {
				t.Fatal(err)
			}
			if len(s.Policies) == 1 && len(s.Policies[0].Hottest) == 1 {
				value = s.Policies[0].Hottest[0].Value
				return true, ""
			}
			return false, "stats " + stats
		})
		return value
	}
	top := []string{"--policies", path, "--top-descriptors", "1", "--top-descriptor-interval", "1s"}

	t.Setenv(limiterwire.TopKeyFileEnv, fleetKey)
	a, b := hottest(startLimiter(t, top...)), hottest(startLimiter(t, top...))
	t.Setenv(limiterwire.TopKeyFileEnv, otherKey)
	other := hottest(startLimiter(t, top...))

	mac := hmac.New(sha256.New, []byte("0123456789abcdef0123456789abcdef"))
	mac.Write([]byte(ip))
	if want := "remote_address=" + hex.EncodeToString(mac.Sum(nil)[:8]); a != want || b != want {
		t.Errorf("two pods of one fleet show %q and %q, want both %q: 64 bits of the keyed hash", a, b, want)
	}
	if other == a {
		t.Errorf("another key shows the same digits %q", other)
	}
	// What an attacker computes: hashes of candidate values, unkeyed.
	sum := sha256.Sum256([]byte(ip))
	for _, unkeyed := range []string{hex.EncodeToString(sum[:6]), hex.EncodeToString(sum[:8])} {
		if strings.Contains(a, unkeyed) {
			t.Errorf("%q shows the unkeyed SHA-256 of the value", a)
		}
	}

	// Truncation is capped at 16 bytes: more is refused at start.
	for _, n := range []string{"17", "64"} {
		cmd := exec.Command(limiterBin, append(top, "--top-descriptor-values", "truncate", "--top-descriptor-truncate", n)...)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "want 1 to 16 bytes") {
			t.Errorf("--top-descriptor-truncate %s: %v %s, want refused", n, err, out)
		}
	}
	// A key file shorter than 16 bytes is refused too.
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(limiterBin, top...)
	cmd.Env = append(os.Environ(), limiterwire.TopKeyFileEnv+"="+short)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "holds 9 bytes, want at least 16") {
		t.Errorf("a 9-byte key file: %v %s, want refused", err, out)
	}
}
