package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/conversiontest"
)

// The operator binary serves the CRDs' conversion webhook: envtest points
// the RateLimitPolicy CRD at the operator's --webhook-port, with the
// certificate it made in --webhook-cert-dir (as cert-manager would mount
// one). A v1alpha1 policy written through the operator's conversion reads
// as v1beta1 and back identical, and a v1beta1 one the same the other way.
func TestOperatorServesConversionWebhook(t *testing.T) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join("..", "..", "bin", "k8s"),
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	conversiontest.Prepare(env) // points the CRD at the address; no server: the operator is it
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "operator-webhook-admin", Groups: []string{"system:masters"}}, nil)
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
	bin := filepath.Join(dir, "operator")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("building the operator: %v", err)
	}
	k8s, err := client.New(cfg, client.Options{Scheme: conversiontest.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "operator-webhook-test"
	if err := k8s.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	wo := env.WebhookInstallOptions
	var log bytes.Buffer
	cmd := exec.Command(bin, "--metrics-bind-address=0", "--health-probe-bind-address="+freeAddr(t),
		"--watch-namespaces="+ns, "--webhook-port="+strconv.Itoa(wo.LocalServingPort), "--webhook-cert-dir="+wo.LocalServingCertDir)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	alpha := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charges"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "payments", Descriptors: []v1alpha1.Descriptor{{Key: "user_id"}},
			Rate: v1alpha1.Rate{Limit: 5, Period: metav1.Duration{Duration: time.Minute}}, Burst: ptr.To[int64](8),
			Soft: ptr.To(true), Visibility: ptr.To(v1alpha1.Visible)}}
	// The API server converts through the operator once it serves.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := k8s.Create(t.Context(), alpha)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no v1alpha1 policy could be created through the operator's webhook within 2m; last error: %v\noperator log:\n%s", err, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	beta := &v1beta1.RateLimitPolicy{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(alpha), beta); err != nil {
		t.Fatal(err)
	}
	if l := beta.Spec.Limit; l.Type != v1beta1.LimitRate || l.Rate == nil || l.Rate.Limit != 5 || *l.Rate.Period != "1m" || *beta.Spec.Mode != v1beta1.Soft {
		t.Errorf("read as v1beta1: %+v", beta.Spec)
	}
	back := &v1alpha1.RateLimitPolicy{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(alpha), back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(alpha.Spec, back.Spec); diff != "" {
		t.Errorf("v1alpha1 -> v1beta1 -> v1alpha1 is not identical (-created +read back):\n%s", diff)
	}

	betaIn := &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "exports"},
		Spec: v1beta1.RateLimitPolicySpec{Domain: "payments", Descriptors: []v1beta1.Descriptor{{Key: "user_id"}},
			Limit: v1beta1.Limit{Type: v1beta1.LimitConcurrency, Concurrency: &v1beta1.ConcurrencyLimit{MaxInFlight: 2}}}}
	if err := k8s.Create(t.Context(), betaIn); err != nil {
		t.Fatal(err)
	}
	asAlpha := &v1alpha1.RateLimitPolicy{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(betaIn), asAlpha); err != nil {
		t.Fatal(err)
	}
	if asAlpha.Spec.EffectiveAlgorithm() != v1alpha1.Concurrency || asAlpha.Spec.Concurrency == nil || asAlpha.Spec.Concurrency.MaxInFlight != 2 {
		t.Errorf("read as v1alpha1: %+v", asAlpha.Spec)
	}
	if err := k8s.Update(t.Context(), asAlpha); err != nil {
		t.Fatalf("writing it back as v1alpha1: %v", err)
	}
	betaBack := &v1beta1.RateLimitPolicy{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(betaIn), betaBack); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(betaIn.Spec, betaBack.Spec); diff != "" {
		t.Errorf("v1beta1 -> v1alpha1 -> v1beta1 is not identical (-created +read back):\n%s", diff)
	}
}
