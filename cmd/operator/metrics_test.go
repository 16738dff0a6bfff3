package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/internal/testnet"
)

// Attack (issue 24, 3): the operator's /metrics is open to every pod that
// reaches it (plain HTTP, no authentication): any tenant pod reads the
// reconcile errors, the fleets and policies by name and the API client's
// calls. The real operator, built from this package and run against a
// real API server, now answers /metrics over HTTPS only to a token the API
// server authenticates and authorizes for get /metrics: no token is 401,
// a ServiceAccount without the permission 403, one with it 200.
func TestAttackReadOperatorMetricsWithoutToken(t *testing.T) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join("..", "..", "bin", "k8s"),
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "operator-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildOperator(t)

	// Tokens: a ServiceAccount allowed get /metrics, and one that is not.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ns = "default"
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, tenant := token("prometheus"), token("tenant")

	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	var log bytes.Buffer
	cmd := exec.Command(bin, "--metrics-bind-address="+metricsAddr, "--health-probe-bind-address="+probeAddr,
		"--watch-namespaces=operator-metrics-test", "--webhook-port=0")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// get GETs /metrics as a pod would: HTTPS without checking the
	// certificate, or plain HTTP when the port doesn't speak TLS.
	get := func(bearer string) (int, string, error) {
		var last error
		for _, scheme := range []string{"https", "http"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+metricsAddr+"/metrics", nil)
			if err != nil {
				return 0, "", err
			}
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // an attacker checks nothing
			resp, err := c.Do(req)
			if err != nil {
				last = err
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b), nil
		}
		return 0, "", last
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, _, err := get("")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator's metrics listener %s does not answer after 2m: %v\n%s", metricsAddr, err, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"a pod without a token", "", http.StatusUnauthorized},
		{"a made-up token", "not-a-token", http.StatusUnauthorized},
		{"a tenant's ServiceAccount", tenant, http.StatusForbidden},
		{"Prometheus's ServiceAccount", prometheus, http.StatusOK},
	} {
		code, body, err := get(tc.token)
		if err != nil {
			t.Fatalf("%s: GET /metrics: %v", tc.who, err)
		}
		if code != tc.want || (code != http.StatusOK && strings.Contains(body, "controller_runtime")) {
			t.Errorf("%s: GET /metrics answered %d (%.80q...), want %d", tc.who, code, body, tc.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "controller_runtime_") {
			t.Errorf("%s: /metrics lacks the controller's metrics", tc.who)
		}
	}
	conn, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", metricsAddr) //nolint:gosec
	if err != nil {
		t.Errorf("the operator's metrics listener does not speak TLS: %v", err)
	} else {
		conn.Close()
	}
}

// freeAddr is a free address of the test process's loopback /24
// (internal/testnet): no other test process binds there meanwhile.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", testnet.IP(1)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
