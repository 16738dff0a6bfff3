package main_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
)

// The API server is started by the first test that needs it and stopped by
// TestMain.
var api struct {
	once      sync.Once
	env       *envtest.Environment
	dir       string        // kubeconfig files
	admin     client.Client // system:masters
	adminFile string        // kubeconfig of admin
	err       error
}

// apiServer returns an admin client of the shared envtest API server and
// the path of a kubeconfig for the same user.
func apiServer(t *testing.T) (client.Client, string) {
	t.Helper()
	api.once.Do(func() {
		logf.SetLogger(logr.Discard())
		api.env = &envtest.Environment{
			// KUBEBUILDER_ASSETS wins when set; hack/setup-envtest.sh builds these.
			// envtest's API server authorizes with RBAC.
			BinaryAssetsDirectory: filepath.Join("..", "..", "bin", "k8s"),
		}
		if _, api.err = api.env.Start(); api.err != nil {
			api.err = fmt.Errorf("starting envtest (run hack/setup-envtest.sh): %w", api.err)
			return
		}
		if api.dir, api.err = os.MkdirTemp("", "limiter-kubeconfig-"); api.err != nil {
			return
		}
		var admin *envtest.AuthenticatedUser
		if admin, api.err = api.env.AddUser(envtest.User{Name: "sluice-test-admin", Groups: []string{"system:masters"}}, nil); api.err != nil {
			return
		}
		// No client-side throttling: it would delay the updates whose
		// latency the tests measure.
		cfg := rest.CopyConfig(admin.Config())
		cfg.QPS = -1
		if api.admin, api.err = client.New(cfg, client.Options{}); api.err != nil {
			return
		}
		api.adminFile, api.err = writeKubeconfig(admin, "admin")
	})
	if api.err != nil {
		t.Fatal(api.err)
	}
	return api.admin, api.adminFile
}

func stopAPIServer() {
	if api.env == nil {
		return
	}
	if err := api.env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	if api.dir != "" {
		os.RemoveAll(api.dir)
	}
}

func writeKubeconfig(u *envtest.AuthenticatedUser, name string) (string, error) {
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(api.dir, name)
	return path, os.WriteFile(path, kc, 0o600)
}

// namespaces numbers the namespaces of the tests, which share one API
// server (also with -count).
var namespaces atomic.Int32

// createNamespace creates a new namespace named after prefix.
func createNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, namespaces.Add(1))
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// snapshotDocument is what an operator writes for two policies in domain
// shop: limit requests a minute per user, and 1000 a minute per IP.
func snapshotDocument(limit int64) (doc []byte, version string) {
	pol := func(name, key string, limit int64) v1alpha1.RateLimitPolicy {
		return v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), Generation: limit},
			Spec: v1alpha1.RateLimitPolicySpec{
				Domain:      "shop",
				Descriptors: []v1alpha1.Descriptor{{Key: key}},
				Rate:        v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: time.Minute}},
			},
		}
	}
	return config.EncodeDocument(config.DocumentFor(policytest.Sources([]v1alpha1.RateLimitPolicy{
		pol("per-user", "user", limit), pol("per-ip", "ip", 1000),
	}...), config.EnforcementEnabled))
}

// setDocument puts doc in cm as the operator does: plain, or
// gzip-compressed in binaryData.
func setDocument(t *testing.T, cm *corev1.ConfigMap, doc []byte, version string, compress bool) {
	t.Helper()
	cm.Data = map[string]string{config.VersionKey: version}
	cm.BinaryData = nil
	if !compress {
		cm.Data[config.DocumentKey] = string(doc)
		return
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(doc); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	cm.BinaryData = map[string][]byte{config.DocumentGzipKey: buf.Bytes()}
}

// admin reads the limiter's admin endpoint; with a version, it long-polls
// until that version is loaded (or fails the test after settle).
func (p *process) admin(t *testing.T, version string) limiterwire.Snapshot {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		path := limiterwire.SnapshotPath
		if version != "" {
			path += "?waitForVersion=" + version + "&timeout=10s"
		}
		code, body := p.adminGet(t, path)
		var s limiterwire.Snapshot
		if err := json.Unmarshal([]byte(body), &s); code != http.StatusOK || err != nil {
			t.Fatalf("%s: %d %s (%v)", path, code, body, err)
		}
		if version == "" || s.Version == version {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("version %s not loaded within %v; loaded: %+v\n%s", version, settle, s, p.log)
		}
	}
}

// health is the limiter's gRPC health status.
func (p *process) health(t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: server.RLSServiceName})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status
}

// metric is the value of one unlabelled sample on /metrics, or "".
func (p *process) metric(t *testing.T, name string) string {
	t.Helper()
	for _, m := range p.metrics(t)[name].GetMetric() {
		if len(m.GetLabel()) == 0 {
			return strconv.FormatFloat(sampleValue(m), 'g', -1, 64)
		}
	}
	return ""
}

// waitUnready waits for /readyz to answer 503 with config's detail, and
// checks that nothing is served.
func (p *process) waitUnready(t *testing.T, detail string) {
	t.Helper()
	var rd readiness
	eventually(t, fmt.Sprintf("/readyz 503 with detail %q", detail), func() (bool, string) {
		var code int
		code, rd = p.readyz(t)
		return code == http.StatusServiceUnavailable && !rd.Checks["config"].OK && strings.HasPrefix(rd.Checks["config"].Detail, detail),
			fmt.Sprintf("%d %+v", code, rd)
	})
	if rd.Ready || rd.SnapshotVersion != "" || rd.Checks["snapshot"].OK {
		t.Errorf("/readyz: %+v, want nothing loaded", rd)
	}
	if st := p.health(t); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health %v, want NOT_SERVING", st)
	}
}

// TestSnapshotConfigMap runs the limiter on a snapshot ConfigMap through
// its life: missing, created, edited (plain and compressed), garbled,
// inconsistent, and deleted.
func TestSnapshotConfigMap(t *testing.T) {
	c, kubeconfig := apiServer(t)
	ctx := t.Context()
	ns := createNamespace(t, c, "fleet-life")
	p := startLimiter(t, "--snapshot-configmap", ns+"/snap", "--kubeconfig", kubeconfig)

	// Missing: serving nothing, and saying so.
	p.waitUnready(t, "waiting for ConfigMap "+ns+"/snap: not found")
	if got := p.admin(t, ""); got.Version != "" || got.Policies == nil || len(got.Policies) != 0 ||
		got.Source != "configmap "+ns+"/snap" || got.LastError != "not found" {
		t.Errorf("admin before a snapshot: %+v", got)
	}

	// Created: loaded and enforced.
	doc, v5 := snapshotDocument(5)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}}
	setDocument(t, cm, doc, v5, false)
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	got := p.admin(t, v5)
	if got.LoadedAt.IsZero() || got.Enforcement != string(config.EnforcementEnabled) || got.LastError != "" ||
		!slices.Equal(got.Policies, []limiterwire.Policy{
			{Namespace: "shop", Name: "per-ip", UID: "uid-per-ip", Generation: 1000},
			{Namespace: "shop", Name: "per-user", UID: "uid-per-user", Generation: 5},
		}) {
		t.Errorf("admin after create: %+v", got)
	}
	if code, rd := p.readyz(t); code != http.StatusOK || rd.SnapshotVersion != v5 || rd.Checks["config"].Detail != "configmap "+ns+"/snap loaded" {
		t.Errorf("/readyz after create: %d %+v", code, rd)
	}
	if st := p.health(t); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health %v, want SERVING", st)
	}
	p.expectLimit(t, "ann", 5)

	// Edited: each edit is loaded. The latency is from just before the
	// update is sent to the limiter's loadedAt; the last edit lowers the
	// limit to 2, which is enforced without a restart.
	var latencies []time.Duration
	for limit := int64(40); limit >= 2; limit-- {
		if limit < 21 && limit > 2 {
			continue
		}
		doc, v := snapshotDocument(limit)
		setDocument(t, cm, doc, v, false)
		sent := time.Now()
		if err := c.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		latencies = append(latencies, p.admin(t, v).LoadedAt.Sub(sent))
	}
	slices.Sort(latencies)
	t.Logf("ConfigMap update sent -> limiter loaded, %d edits: min %v, p50 %v, max %v",
		len(latencies), latencies[0], latencies[len(latencies)/2], latencies[len(latencies)-1])
	p.expectLimit(t, "bea", 2)
	if code, _ := p.check(t, "ann"); code != http.StatusTooManyRequests {
		t.Errorf("ann after the edit: %d, want still limited", code)
	}

	// Compressed, as the operator stores large snapshots.
	doc, v3 := snapshotDocument(3)
	setDocument(t, cm, doc, v3, true)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	p.admin(t, v3)
	p.expectLimit(t, "cid", 3)

	// Garbled: refused, counted, logged and shown; the limit of 3 stays.
	cm.Data, cm.BinaryData = map[string]string{config.DocumentKey: `{"policies": [`}, nil
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "garbled snapshot counted", func() (bool, string) {
		n := p.metric(t, "sluice_config_reload_errors_total")
		return n == "1", "sluice_config_reload_errors_total " + n
	})
	code, rd := p.readyz(t)
	if detail := rd.Checks["config"].Detail; code != http.StatusOK || rd.SnapshotVersion != v3 ||
		!strings.Contains(detail, "last reload failed, previous policies in force") || !strings.Contains(detail, "snapshot document") {
		t.Errorf("/readyz with a garbled ConfigMap: %d %+v, want ready on %s, naming the error", code, rd, v3)
	}
	if got := p.admin(t, ""); got.Version != v3 || !strings.Contains(got.LastError, "snapshot document") {
		t.Errorf("admin with a garbled ConfigMap: %+v", got)
	}
	if p.metric(t, "sluice_config_last_reload_successful") != "0" {
		t.Error("sluice_config_last_reload_successful is not 0")
	}
	if log := p.log.String(); !strings.Contains(log, "Snapshot ConfigMap not reloaded; keeping the loaded policies") {
		t.Errorf("log lacks the reload error:\n%s", log)
	}
	p.expectLimit(t, "dan", 3)

	// A version key that is not the document's: refused too.
	doc, _ = snapshotDocument(9)
	setDocument(t, cm, doc, v3, false)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "inconsistent snapshot counted", func() (bool, string) {
		n := p.metric(t, "sluice_config_reload_errors_total")
		return n == "2", "sluice_config_reload_errors_total " + n
	})
	if _, rd := p.readyz(t); rd.SnapshotVersion != v3 || !strings.Contains(rd.Checks["config"].Detail, `data[version] is "`+v3+`" but the document's version is`) {
		t.Errorf("/readyz with a version mismatch: %+v", rd)
	}
	p.expectLimit(t, "eve", 3)

	// Fixed: loaded, and the error clears.
	doc, v4 := snapshotDocument(4)
	setDocument(t, cm, doc, v4, false)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if got := p.admin(t, v4); got.LastError != "" {
		t.Errorf("admin after the fix: %+v", got)
	}
	p.expectLimit(t, "fay", 4)

	// Deleted: the last snapshot stays in force, and readiness says why.
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deletion noticed", func() (bool, string) {
		code, rd := p.readyz(t)
		return code == http.StatusOK && strings.Contains(rd.Checks["config"].Detail, "ConfigMap "+ns+"/snap not found (deleted?), previous policies in force"),
			fmt.Sprintf("%d %+v", code, rd)
	})
	if got := p.admin(t, ""); got.Version != v4 || got.LastError != "not found" {
		t.Errorf("admin after delete: %+v", got)
	}
	p.expectLimit(t, "gus", 4)
	if st := p.health(t); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health after delete %v, want SERVING", st)
	}
}

// TestSnapshotConfigMapGarbledAtStart: with nothing good to load, the
// limiter serves nothing until the ConfigMap is fixed.
func TestSnapshotConfigMapGarbledAtStart(t *testing.T) {
	c, kubeconfig := apiServer(t)
	ctx := t.Context()
	ns := createNamespace(t, c, "fleet-garbled")
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"},
		Data:       map[string]string{config.DocumentKey: `{"enforcement":"Sometimes","policies":[]}`},
	}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	p := startLimiter(t, "--snapshot-configmap", ns+"/snap", "--kubeconfig", kubeconfig)
	p.waitUnready(t, "waiting for ConfigMap "+ns+"/snap: invalid: snapshot document: enforcement \"Sometimes\"")
	if got := p.metric(t, "sluice_config_reload_errors_total"); got != "1" {
		t.Errorf("sluice_config_reload_errors_total %s, want 1", got)
	}
	if log := p.log.String(); !strings.Contains(log, "Snapshot ConfigMap invalid; no policies loaded, not ready") {
		t.Errorf("log lacks the error:\n%s", log)
	}

	doc, v := snapshotDocument(2)
	setDocument(t, cm, doc, v, false)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	p.admin(t, v)
	if code, rd := p.readyz(t); code != http.StatusOK {
		t.Errorf("/readyz once fixed: %d %+v", code, rd)
	}
	p.expectLimit(t, "ann", 2)
}

// TestSnapshotConfigMapLeastPrivilege runs the limiter as a user that may
// only get, list and watch its one ConfigMap, as the fleet's Role allows.
func TestSnapshotConfigMapLeastPrivilege(t *testing.T) {
	c, _ := apiServer(t)
	ctx := t.Context()
	ns := createNamespace(t, c, "fleet-rbac")
	userName := "limiter-" + ns
	user, err := api.env.AddUser(envtest.User{Name: userName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := writeKubeconfig(user, userName)
	if err != nil {
		t.Fatal(err)
	}

	// Without a binding the limiter can't even list: it says so.
	p := startLimiter(t, "--snapshot-configmap", ns+"/snap", "--kubeconfig", kubeconfig)
	p.waitUnready(t, `waiting for ConfigMap `+ns+`/snap: failed to list *v1.ConfigMap: configmaps "snap" is forbidden`)

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limiter"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{"snap"},
			Verbs:         []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limiter"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "limiter"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userName}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The informer retries with backoff; it is then allowed to see the
	// ConfigMap is missing.
	p.waitUnready(t, "waiting for ConfigMap "+ns+"/snap: not found")

	// The user really is that limited: no other ConfigMap, no plain list.
	limited, err := client.New(user.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := limited.Get(ctx, client.ObjectKeyFromObject(other), &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
		t.Errorf("get another ConfigMap as the limiter: %v, want Forbidden", err)
	}
	if err := limited.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Errorf("list ConfigMaps as the limiter: %v, want Forbidden", err)
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}}
	doc, v := snapshotDocument(3)
	setDocument(t, cm, doc, v, true)
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	p.admin(t, v)
	p.expectLimit(t, "ann", 3)
	doc, v = snapshotDocument(1)
	setDocument(t, cm, doc, v, false)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	p.admin(t, v)
	p.expectLimit(t, "bea", 1)
}
