// Package tests checks the Sluice chart the way a platform team meets it:
// the real helm and kubectl against a real kube-apiserver and etcd
// (envtest), with the real operator binary running under the chart's RBAC.
//
// It needs bin/helm (make helm) and kubectl on PATH, and fails, rather than
// skips, without them. make helm-test runs it.
package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

var (
	testEnv *envtest.Environment
	k8s     client.Client
	scheme  = runtime.NewScheme()

	repoRoot    string // the module root
	chartDir    string // charts/sluice
	helmBin     string
	operatorBin string
	workDir     string
	adminConfig string // kubeconfig of a system:masters user, for helm and kubectl
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))

	var err error
	if repoRoot, err = filepath.Abs("../../.."); err != nil {
		return fail(err)
	}
	chartDir = filepath.Join(repoRoot, "charts", "sluice")
	if helmBin = os.Getenv("HELM"); helmBin == "" {
		helmBin = filepath.Join(repoRoot, "bin", "helm")
	}
	if _, err := os.Stat(helmBin); err != nil {
		return fail(fmt.Errorf("helm not found at %s: run `make helm` (it builds the pinned helm into bin/ from the Go module proxy)", helmBin))
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		return fail(errors.New("kubectl not found on PATH (make kubectl builds one into bin/): the chart tests apply policies and validate manifests with it"))
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Setenv("KUBEBUILDER_ASSETS", filepath.Join(repoRoot, "bin", "k8s"))
	}
	if workDir, err = os.MkdirTemp("", "sluice-chart-"); err != nil {
		return fail(err)
	}
	defer os.RemoveAll(workDir)
	// Keep helm's cache, config and data out of the user's home.
	for _, v := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"} {
		os.Setenv(v, filepath.Join(workDir, strings.ToLower(v)))
	}

	// The operator as make images builds it, so that the build is shared.
	operatorBin = filepath.Join(workDir, "operator")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", operatorBin, "./cmd/operator")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("building the operator: %v\n%s", err, out))
	}

	// The API server starts without Sluice's CRDs: the chart installs them.
	// The Prometheus Operator's CRDs are there to validate the chart's
	// optional ServiceMonitor, PodMonitor and PrometheusRule.
	testEnv = &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join("testdata", "monitoring.coreos.com_servicemonitors.yaml"),
			filepath.Join("testdata", "monitoring.coreos.com_podmonitors.yaml"),
			filepath.Join("testdata", "monitoring.coreos.com_prometheusrules.yaml"),
		},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := testEnv.Start()
	if err != nil {
		_ = testEnv.Stop() // a failed start may leave the control plane running
		return fail(fmt.Errorf("starting envtest (make envtest builds it): %w", err))
	}
	defer func() { _ = testEnv.Stop() }()
	// Helm checks the chart's kubeVersion against the server's version.
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fail(err)
	}
	if v, err := dc.ServerVersion(); err != nil || strings.HasPrefix(v.GitVersion, "v0.0.0") {
		return fail(fmt.Errorf("kube-apiserver reports version %v (%v): run `make envtest`, which now builds it with its version stamped", v, err))
	}
	testCfg := rest.CopyConfig(cfg)
	testCfg.QPS = -1
	if k8s, err = client.New(testCfg, client.Options{Scheme: scheme}); err != nil {
		return fail(err)
	}
	if adminConfig, err = addUser("chart-admin", "system:masters"); err != nil {
		return fail(err)
	}
	return m.Run()
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "chart tests:", err)
	return 1
}

// addUser writes a kubeconfig for a user the API server authenticates by a
// client certificate, and returns its path. ServiceAccounts are users named
// system:serviceaccount:<namespace>:<name>, so this also stands in for a
// pod's token.
func addUser(name string, groups ...string) (string, error) {
	u, err := testEnv.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", err
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(workDir, "kubeconfig-"+strings.NewReplacer(":", "_", "/", "_").Replace(name))
	return path, os.WriteFile(path, kc, 0o600)
}

// run runs a command and returns its stdout and stderr.
func run(stdin string, name string, args ...string) (string, string, error) {
	cmd := exec.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// helm runs the real helm against the test API server as the admin.
func helm(args ...string) (string, string, error) {
	return run("", helmBin, append(args, "--kubeconfig", adminConfig)...)
}

func mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := helm(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectl runs kubectl with the given kubeconfig.
func kubectl(kubeconfig, stdin string, args ...string) (string, string, error) {
	return run(stdin, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

func mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := kubectl(adminConfig, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// render runs helm template and decodes the objects.
func render(t *testing.T, release, namespace string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, _, err := run("", helmBin, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// decode splits a multi-document manifest into objects.
func decode(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if err == io.EOF {
				return objs, nil
			}
			return nil, err
		}
		if len(o) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: o})
		}
	}
}

// find returns the objects of a kind, in rendering order.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// convert turns a rendered object into a typed one.
func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var typed T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &typed); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &typed
}

// settle is how long a test waits for the API server or the operator to
// act (a CRD established, an object reconciled, a condition set): sized for
// a loaded 2-core machine running -race.
const settle = 2 * time.Minute

// eventually polls fn until it returns nil, and fails with its last error
// after timeout.
func eventually(t *testing.T, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// operatorProcess is the real operator binary, running with a kubeconfig.
type operatorProcess struct {
	cmd     *exec.Cmd
	log     *bytes.Buffer
	done    chan error
	stopped bool
}

// startOperator runs the operator with the arguments of a rendered
// Deployment, so that the chart's flags are the ones tested. Only the
// listen addresses change: metrics off, health probes on a free loopback
// port, since tests share the machine. It runs until t's cleanup, so that
// it can outlive one step of a test.
func startOperator(t *testing.T, kubeconfig string, chartArgs []string) (*operatorProcess, error) {
	args := []string{"--kubeconfig", kubeconfig}
	for _, a := range chartArgs {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=0"
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=127.0.0.1:0"
		case strings.HasPrefix(a, "--webhook-port="):
			a = "--webhook-port=0" // the test serves the conversion (serveConversion)
		}
		args = append(args, a)
	}
	p := &operatorProcess{cmd: exec.Command(operatorBin, args...), log: &bytes.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	return p, nil
}

// stop ends the operator and reports its log if the test failed.
func (p *operatorProcess) stop(t *testing.T) {
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if t.Failed() {
		t.Logf("operator %s log:\n%s", strings.Join(p.cmd.Args[1:], " "), p.log.String())
	}
}

// operatorArgs returns the operator container's arguments in a manifest.
func operatorArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, d := range find(objs, "Deployment") {
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if c, _ := c.(map[string]any); c["name"] == "operator" {
				args, _, _ := unstructured.NestedStringSlice(c, "args")
				return args
			}
		}
	}
	t.Fatal("no operator container in the manifest")
	return nil
}

func hasArg(args []string, want string) bool { return slices.Contains(args, want) }

var ctx = context.Background()
