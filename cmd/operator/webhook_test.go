package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/conversiontest"
)

// buildOperator builds the operator into a temporary directory and
// returns its path.
func buildOperator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "operator")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("building the operator: %v", err)
	}
	return bin
}

// webhookEnv starts envtest with the RateLimitPolicy CRD converting at
// https://localhost:<port>/convert (no server there: the operator is it),
// builds the operator, and returns a client, the webhook options and a
// kubeconfig and binary to run the operator with.
func webhookEnv(t *testing.T) (k8s client.Client, o envtest.WebhookInstallOptions, kubeconfig, bin string) {
	// Built first: envtest picks the webhook's free port when it starts,
	// and another process may take it before the operator listens (two
	// make test side by side met "address already in use" once).
	bin = buildOperator(t)
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join("..", "..", "bin", "k8s"),
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// The API server calls localhost, a name the operator's own
		// certificate can carry (--webhook-extra-dns-names).
		WebhookInstallOptions: envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1", LocalServingHostExternalName: "localhost"},
	}
	conversiontest.Prepare(env)
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
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	s := conversiontest.Scheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: s}); err != nil {
		t.Fatal(err)
	}
	return k8s, env.WebhookInstallOptions, kubeconfig, bin
}

// runOperator runs the operator binary with args until the test ends.
func runOperator(t *testing.T, bin, kubeconfig string, args ...string) *bytes.Buffer {
	var log bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=" + freeAddr(t), "--webhook-host=127.0.0.1"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &log
}

// requireConverts creates a v1alpha1 policy once the API server can
// convert it through the operator, reads it as v1beta1 and back identical,
// and does the same with a v1beta1 one the other way.
func requireConverts(t *testing.T, k8s client.Client, ns string, log *bytes.Buffer) {
	alpha := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charges"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "payments", Descriptors: []v1alpha1.Descriptor{{Key: "user_id"}},
			Rate: v1alpha1.Rate{Limit: 5, Period: metav1.Duration{Duration: time.Minute}}, Burst: ptr.To[int64](8),
			Soft: ptr.To(true), Visibility: ptr.To(v1alpha1.Visible)}}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := k8s.Create(t.Context(), alpha)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no v1alpha1 policy could be created through the operator's webhook within 3m; last error: %v\noperator log:\n%s", err, log.String())
		}
		time.Sleep(250 * time.Millisecond)
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
	// The operator writes the policy's status meanwhile: write it back as
	// kubectl edit would, again on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(betaIn), asAlpha); err != nil {
			return err
		}
		return k8s.Update(t.Context(), asAlpha)
	}); err != nil {
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

func createNS(t *testing.T, k8s client.Client, name string) {
	if err := k8s.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// The operator binary serves the CRDs' conversion webhook with a
// certificate made elsewhere (as cert-manager would mount one): envtest's,
// in --webhook-cert-dir.
func TestOperatorServesConversionWebhook(t *testing.T) {
	k8s, o, kubeconfig, bin := webhookEnv(t)
	const ns = "operator-webhook-test"
	createNS(t, k8s, ns)
	log := runOperator(t, bin, kubeconfig, "--watch-namespaces="+ns,
		"--webhook-port="+strconv.Itoa(o.LocalServingPort), "--webhook-cert-dir="+o.LocalServingCertDir)
	requireConverts(t, k8s, ns, log)
}

// The operator issues its own certificate (cert-controller): it fills the
// empty Secret the chart makes, and injects its CA into the CRD's
// conversion caBundle, replacing envtest's. The test stands in for the
// kubelet, which would bring the Secret into the pod's --webhook-cert-dir.
// Conversions then succeed only with the operator's certificate and CA.
func TestOperatorIssuesWebhookCertificate(t *testing.T) {
	k8s, o, kubeconfig, bin := webhookEnv(t)
	const ns = "sluice-system"
	createNS(t, k8s, ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sluice-operator-webhook-cert"}}
	if err := k8s.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The test reads the Secret into secret meanwhile: the goroutine has its key.
	key := client.ObjectKeyFromObject(secret)
	go mountSecret(ctx, k8s, key, certDir)
	log := runOperator(t, bin, kubeconfig, "--watch-namespaces="+ns,
		"--webhook-port="+strconv.Itoa(o.LocalServingPort), "--webhook-cert-dir="+certDir,
		"--webhook-namespace="+ns, "--webhook-service=sluice-operator-webhook", "--webhook-cert-secret="+secret.Name,
		"--webhook-extra-dns-names=localhost")
	requireConverts(t, k8s, ns, log)

	var crd apiextensionsv1.CustomResourceDefinition
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: "ratelimitpolicies.ratelimit.sluice.dev"}, &crd); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	got := crd.Spec.Conversion.Webhook.ClientConfig.CABundle
	if !bytes.Equal(got, secret.Data["ca.crt"]) || bytes.Equal(got, o.LocalServingCAData) {
		t.Errorf("the CRD's caBundle is not the CA the operator issued in its Secret (envtest's: %v)", bytes.Equal(got, o.LocalServingCAData))
	}
}

// A lone operator killed and started again (its container restarted in
// place, its node rebooted) finds the policies stored as v1beta1. Its
// caches read them as such, but v1alpha1 clients need its conversion
// webhook (an earlier release's caches did too, and waited for ever): it
// must serve the certificate mounted from its Secret before they sync, as
// no other replica answers the conversions. The second
// operator converts and reconciles a policy created after it started, once
// the Lease the first held has expired: both run with a Lease of 5s
// (--leader-elect-lease-duration), which the Lease records.
func TestOperatorRestartsAloneWithStoredPolicies(t *testing.T) {
	k8s, o, kubeconfig, bin := webhookEnv(t)
	const ns = "sluice-system"
	createNS(t, k8s, ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sluice-operator-webhook-cert"}}
	if err := k8s.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	key := client.ObjectKeyFromObject(secret)
	go mountSecret(ctx, k8s, key, certDir)
	args := []string{"--webhook-port=" + strconv.Itoa(o.LocalServingPort), "--webhook-cert-dir=" + certDir,
		"--webhook-namespace=" + ns, "--webhook-service=sluice-operator-webhook", "--webhook-cert-secret=" + secret.Name,
		"--webhook-extra-dns-names=localhost", "--leader-elect", "--leader-election-namespace=" + ns, "--operator-namespace=" + ns,
		"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"}
	first := exec.Command(bin, append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=" + freeAddr(t), "--webhook-host=127.0.0.1"}, args...)...)
	first.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var firstLog bytes.Buffer
	first.Stdout, first.Stderr = &firstLog, &firstLog
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	requireConverts(t, k8s, ns, &firstLog)
	waitLease(t, k8s, ns, 5, &firstLog)
	// Killed, as a node's power cut kills it: nothing serves conversions.
	_ = first.Process.Kill()
	_ = first.Wait()

	log := runOperator(t, bin, kubeconfig, args...)
	later := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after-restart"},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "payments", Descriptors: []v1alpha1.Descriptor{{Key: "user_id"}},
			Rate: v1alpha1.Rate{Limit: 5, Period: metav1.Duration{Duration: time.Minute}}}}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := k8s.Create(t.Context(), later)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no v1alpha1 policy could be created through the restarted operator's webhook within 3m; last error: %v\noperator log:\n%s", err, log.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	for {
		got := &v1alpha1.RateLimitPolicy{}
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(later), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted operator never reconciled policy %s (no condition within 3m): its caches did not sync\noperator log:\n%s", later.Name, log.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitLease waits until the operator's leader election Lease in ns has a
// holder, and checks that it holds for seconds.
func waitLease(t *testing.T, k8s client.Client, ns string, seconds int32, log *bytes.Buffer) {
	t.Helper()
	lease := &coordinationv1.Lease{}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: leaderElectionID}, lease)
		if err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no operator held Lease %s/%s within 2m (last read: %v, %+v)\noperator log:\n%s", ns, leaderElectionID, err, lease.Spec, log.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got := ptr.Deref(lease.Spec.LeaseDurationSeconds, 0); got != seconds {
		t.Errorf("Lease %s/%s holds for %ds, want %ds (--leader-elect-lease-duration)", ns, leaderElectionID, got, seconds)
	}
}

// mountSecret is the kubelet's part: the Secret's files in the pod's dir,
// each written whole, until ctx ends.
func mountSecret(ctx context.Context, k8s client.Client, key client.ObjectKey, dir string) {
	for ctx.Err() == nil {
		var s corev1.Secret
		if k8s.Get(ctx, key, &s) == nil && len(s.Data["tls.crt"]) > 0 {
			for name, data := range s.Data {
				_ = os.WriteFile(filepath.Join(dir, name+".tmp"), data, 0o600)
				_ = os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name))
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
