package kube_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/internal/testtier"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
)

// document is the canonical snapshot of one policy: limit requests a
// minute per user in domain shop.
func document(limit int64) ([]byte, string) {
	p := v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "per-user", UID: "u-1", Generation: limit},
		Spec: v1alpha1.RateLimitPolicySpec{
			Domain:      "shop",
			Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate:        v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: time.Minute}},
		},
	}
	return config.EncodeDocument(config.DocumentFor(policytest.Sources([]v1alpha1.RateLimitPolicy{p}...), config.EnforcementEnabled))
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func plainCM(doc []byte, version string) *corev1.ConfigMap {
	return &corev1.ConfigMap{Data: map[string]string{config.DocumentKey: string(doc), config.VersionKey: version}}
}

func TestDecode(t *testing.T) {
	doc, version := document(5)
	other, otherVersion := document(7)
	for _, tc := range []struct {
		name string
		cm   *corev1.ConfigMap
		want string // error substring; "" means version
	}{
		{"plain", plainCM(doc, version), ""},
		{"plain without version key", &corev1.ConfigMap{Data: map[string]string{config.DocumentKey: string(doc)}}, ""},
		{"gzip", &corev1.ConfigMap{
			Data:       map[string]string{config.VersionKey: version},
			BinaryData: map[string][]byte{config.DocumentGzipKey: gz(t, doc)},
		}, ""},
		{"empty", &corev1.ConfigMap{}, "neither data[snapshot.json] nor binaryData[snapshot.json.gz]"},
		{"both", &corev1.ConfigMap{
			Data:       map[string]string{config.DocumentKey: string(doc)},
			BinaryData: map[string][]byte{config.DocumentGzipKey: gz(t, doc)},
		}, "both data[snapshot.json] and binaryData[snapshot.json.gz]"},
		{"garbled", plainCM([]byte(`{"policies": [`), version), "snapshot document"},
		{"unknown field", plainCM([]byte(`{"policies":[],"extra":1}`), ""), `unknown field "extra"`},
		{"invalid policy", plainCM(bytes.Replace(doc, []byte(`"limit":5`), []byte(`"limit":0`), 1), ""), "spec.limit.rate.limit"},
		{"version mismatch", plainCM(other, version), fmt.Sprintf("data[version] is %q but the document's version is %q", version, otherVersion)},
		{"not gzip", &corev1.ConfigMap{BinaryData: map[string][]byte{config.DocumentGzipKey: doc}}, "binaryData[snapshot.json.gz]: gzip: "},
		{"truncated gzip", &corev1.ConfigMap{BinaryData: map[string][]byte{config.DocumentGzipKey: gz(t, doc)[:40]}}, "binaryData[snapshot.json.gz]: gzip: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := kube.Decode(tc.cm)
			if tc.want == "" {
				if err != nil || snap.Version != version {
					t.Fatalf("Decode: %v, %v; want version %s", snap, err, version)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A small ConfigMap must not decompress into gigabytes.
func TestDecodeBoundsDecompression(t *testing.T) {
	bomb := gz(t, bytes.Repeat([]byte{' '}, kube.MaxDocumentBytes+1))
	if len(bomb) > 1<<20 {
		t.Fatalf("test bomb is %d bytes compressed", len(bomb))
	}
	_, err := kube.Decode(&corev1.ConfigMap{BinaryData: map[string][]byte{config.DocumentGzipKey: bomb}})
	if want := fmt.Sprintf("decompresses to more than %d bytes", kube.MaxDocumentBytes); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Decode of a gzip bomb: %v, want %q", err, want)
	}
}

func TestParseName(t *testing.T) {
	if n, err := kube.ParseName("sluice-system/fleet-a-snapshot"); err != nil || n.Namespace != "sluice-system" || n.Name != "fleet-a-snapshot" {
		t.Fatalf("ParseName: %v %v", n, err)
	}
	for _, s := range []string{"", "name", "/name", "ns/", "a/b/c", "Upper/name", "ns/bad_name"} {
		if _, err := kube.ParseName(s); err == nil {
			t.Errorf("ParseName(%q) succeeded", s)
		}
	}
}

func TestRESTConfigFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t0k3n}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := kube.RESTConfig(path)
	if err != nil || cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "t0k3n" || cfg.UserAgent != "sluice-limiter" {
		t.Fatalf("RESTConfig(%s): %+v, %v", path, cfg, err)
	}
	t.Setenv("KUBECONFIG", path)
	if cfg, err := kube.RESTConfig(""); err != nil || cfg.Host != "https://127.0.0.1:6443" {
		t.Fatalf("RESTConfig with $KUBECONFIG: %+v, %v", cfg, err)
	}
	if _, err := kube.RESTConfig(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Fatalf("RESTConfig of a missing file: %v", err)
	}
}

// startAPIServer starts envtest's kube-apiserver and etcd for one test.
func startAPIServer(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	testtier.Integration(t, "envtest")
	env := &envtest.Environment{
		// KUBEBUILDER_ASSETS wins when set; hack/setup-envtest.sh builds these.
		BinaryAssetsDirectory: filepath.Join("..", "..", "..", "bin", "k8s"),
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest (run hack/setup-envtest.sh): %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return env, cfg
}
