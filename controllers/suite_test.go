package controllers_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/conversiontest"
	"github.com/sluice-dev/sluice/internal/testwait"
)

// The envtest suite is a real kube-apiserver and etcd, the operator's
// controllers in-process, and real limiter processes on loopback addresses
// behind Pod and EndpointSlice objects (fleetPods). It starts on first use:
// a test that needs it calls needSuite first, and the pure tests (status
// and window logic; the builders' are in controllers/resources) run without
// it, in seconds, e.g. `go test -run TestFitSnapshot ./controllers/`.
// TestMain stops it.
var (
	testEnv    *envtest.Environment
	cfg        *rest.Config
	k8s        client.Client
	scheme     = newScheme()
	kubeconfig string // for limiter processes and kubectl
	limiterBin string
	workDir    string
	// operatorTokenFile holds a token of the operator's ServiceAccount,
	// bound to the generated ClusterRole (config/rbac/role.yaml): the
	// operator sends it to the limiters' admin plane, which reviews it
	// (--admin-auth=kubernetes), as in production.
	operatorTokenFile string
	operatorToken     string
	// metricsToken is a token of a ServiceAccount that may get /metrics,
	// as the chart grants Prometheus.
	metricsToken string

	suiteOnce sync.Once
	suiteErr  error

	operatorMu     sync.Mutex
	operatorCancel context.CancelFunc
	operatorDone   chan struct{}
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(v1beta1.AddToScheme(s))
	return s
}

// stopConversion stops the conversion webhook startSuite serves.
var stopConversion func()

func TestMain(m *testing.M) {
	// SLUICE_TEST_OPERATOR_LOG=FILE keeps the in-process operator's log,
	// to see why a test waited on it in vain.
	var logTo io.Writer = io.Discard
	if path := os.Getenv("SLUICE_TEST_OPERATOR_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "SLUICE_TEST_OPERATOR_LOG:", err)
			os.Exit(2)
		}
		defer f.Close()
		logTo = f
	}
	logf.SetLogger(zap.New(zap.WriteTo(logTo), zap.UseDevMode(false)))
	code := m.Run()
	stopSuite()
	os.Exit(code)
}

// needSuite starts the envtest suite the first time a test asks for it, and
// fails the test if it could not start.
func needSuite(t testing.TB) {
	t.Helper()
	suiteOnce.Do(func() {
		if suiteErr = startSuite(); suiteErr != nil {
			stopSuite()
		}
	})
	if suiteErr != nil {
		t.Fatalf("starting the envtest suite: %v", suiteErr)
	}
}

// startSuite builds the limiter, starts the API server and the operator.
func startSuite() error {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		abs, _ := filepath.Abs("../bin/k8s")
		os.Setenv("KUBEBUILDER_ASSETS", abs)
	}
	var err error
	if workDir, err = os.MkdirTemp("", "sluice-suite-"); err != nil {
		return err
	}
	limiterBin = filepath.Join(workDir, "limiter")
	build := exec.Command("go", "build", "-o", limiterBin, "../cmd/limiter")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the limiter: %w", err)
	}

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// RateLimitPolicy is stored as v1beta1: v1alpha1 reads and writes
	// convert through the webhook, served here for the whole suite (the
	// operator restarts within it).
	conversiontest.Prepare(testEnv)
	if cfg, err = testEnv.Start(); err != nil {
		return fmt.Errorf("starting envtest: %w", err)
	}
	if stopConversion, err = conversiontest.Serve(testEnv); err != nil {
		return err
	}
	// The test's own client is not throttled (client-go's default is 5/s);
	// the operator runs with cmd/operator's settings, as in production.
	testCfg := rest.CopyConfig(cfg)
	testCfg.QPS = -1
	if k8s, err = client.New(testCfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	admin, err := testEnv.AddUser(envtest.User{Name: "suite-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig = filepath.Join(workDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	startGarbageCollector()
	if err := operatorIdentity(); err != nil {
		return fmt.Errorf("the operator's ServiceAccount: %w", err)
	}
	if err := startOperator(); err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	return nil
}

// stopSuite stops whatever startSuite started.
func stopSuite() {
	stopOperator()
	stopGarbageCollector()
	if stopConversion != nil {
		stopConversion()
	}
	if testEnv != nil {
		_ = testEnv.Stop() // a failed start may leave the control plane running
	}
	if workDir != "" {
		_ = os.RemoveAll(workDir)
	}
}

// operatorIdentity creates the operator's ServiceAccount with the generated
// ClusterRole, and writes a token of it to operatorTokenFile.
func operatorIdentity() error {
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		return err
	}
	const ns = "sluice-identities"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	metrics := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sluice-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	tokenOf := func(role *rbacv1.ClusterRole, name string, audiences ...string) (string, error) {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		for _, obj := range []client.Object{sa, role,
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}},
		} {
			if err := k8s.Create(ctx, obj); err != nil {
				return "", err
			}
		}
		tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600)), Audiences: audiences}}
		if err := k8s.SubResource("token").Create(ctx, sa, tr); err != nil {
			return "", err
		}
		return tr.Status.Token, nil
	}
	if metricsToken, err = tokenOf(metrics, "prometheus"); err != nil {
		return err
	}
	// The operator's token is a projected one for the limiters' audience,
	// as the chart mounts it.
	if operatorToken, err = tokenOf(role, "sluice-operator", limiterwire.AdminAudience); err != nil {
		return err
	}
	operatorTokenFile = filepath.Join(workDir, "operator-token")
	return os.WriteFile(operatorTokenFile, []byte(operatorToken), 0o600)
}

// adminGet GETs url on a limiter's admin plane with the operator's token.
func adminGet(url string) (*http.Response, error) { return getWithToken(url, operatorToken) }

func getWithToken(url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return testAdminClient.Do(req)
}

// testAdminClient is the tests' own client of the limiters' admin plane,
// which serves HTTPS: it checks no certificate (what the tests read is
// what they check; how the operator verifies limiters is under test
// elsewhere, with the operator's own client).
var testAdminClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	Proxy:           nil,
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
}}

// adminTLSFiles waits for the fleet's admin TLS Secret, which the operator
// issues, and writes its certificate and key to files for limiter
// processes, as the Secret's volume does in a pod.
func adminTLSFiles(t testing.TB, fleet *v1alpha1.LimiterFleet) (certFile, keyFile string) {
	t.Helper()
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: fleet.Namespace, Name: resources.AdminTLSSecretName(betaOf(fleet))}
	eventually(t, 60*time.Second, "the operator issues Secret "+key.String(), func() error {
		if err := k8s.Get(context.Background(), key, secret); err != nil {
			return err
		}
		if len(secret.Data[corev1.TLSCertKey]) == 0 || len(secret.Data[corev1.TLSPrivateKeyKey]) == 0 {
			return fmt.Errorf("no %s and %s yet", corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		}
		return nil
	})
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, corev1.TLSCertKey), filepath.Join(dir, corev1.TLSPrivateKeyKey)
	for f, b := range map[string][]byte{certFile: secret.Data[corev1.TLSCertKey], keyFile: secret.Data[corev1.TLSPrivateKeyKey]} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// startOperator runs the operator's manager in-process, as cmd/operator does.
func startOperator() error { return startOperatorWith(nil) }

// startOperatorWith starts the operator with its options and API client
// config changed by mod, when not nil.
func startOperatorWith(mod func(*controllers.Options, *rest.Config)) error {
	operatorMu.Lock()
	defer operatorMu.Unlock()
	opCfg := rest.CopyConfig(cfg)
	opCfg.QPS, opCfg.Burst = 20, 30 // what ctrl.GetConfig gives cmd/operator
	opts := controllers.Options{LimiterImage: "sluice-limiter:test", AckClient: podNetwork.client(), AdminTokenFile: operatorTokenFile,
		// Fast collections, so that status.enforcement follows traffic
		// within a second.
		CollectInterval: 200 * time.Millisecond, EnforcementMinWrite: 500 * time.Millisecond, CollectTimeout: 500 * time.Millisecond}
	opts.NetworkPolicies = npOptions
	if mod != nil {
		mod(&opts, opCfg)
	}
	mgr, err := ctrl.NewManager(opCfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{ByObject: controllers.CacheByObject()},
		// The suite restarts the operator in one process.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := controllers.Setup(ctx, mgr, opts); err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "operator stopped:", err)
		}
	}()
	operatorCancel, operatorDone = cancel, done
	return nil
}

func stopOperator() {
	operatorMu.Lock()
	defer operatorMu.Unlock()
	if operatorCancel != nil {
		operatorCancel()
		<-operatorDone
		operatorCancel = nil
	}
}

// updateFleet changes a fleet with mutate, reading it afresh until the
// update lands: the operator writes the fleet's status meanwhile, and an
// update from a stale read conflicts.
func updateFleet(t testing.TB, key client.ObjectKey, mutate func(*v1alpha1.LimiterFleet)) *v1alpha1.LimiterFleet {
	t.Helper()
	f := &v1alpha1.LimiterFleet{}
	eventually(t, time.Minute, "updating fleet "+key.String(), func() error {
		if err := k8s.Get(context.Background(), key, f); err != nil {
			return err
		}
		mutate(f)
		return k8s.Update(context.Background(), f)
	})
	return f
}

// minWait is the least any wait gives its condition: the suite runs with
// -race on loaded 2-core machines, beside other suites, where a pass of
// the operator that takes a second when idle can take tens of seconds. A
// deadline is only the bound at which a failure shows, so it costs nothing
// when the condition comes true; on a machine loaded far past its cores it
// is extended (internal/testwait).
const minWait = 2 * time.Minute

// eventually polls f until it returns nil or the deadline (within, at
// least minWait) passes, and then fails saying what f last returned.
func eventually(t testing.TB, within time.Duration, what string, f func() error) {
	t.Helper()
	deadline := testwait.New(max(within, minWait))
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if deadline.Passed(func(format string, args ...any) { t.Logf("%s: "+format, append([]any{what}, args...)...) }) {
			t.Fatalf("%s: still not true after %v: %v", what, deadline.Waited(), err)
		}
		time.Sleep(50 * time.Millisecond) // polling the API server and processes
	}
}

func namespace(t testing.TB, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	// What an earlier test's fleet of the same name left behind, were an
	// in-flight reconcile still writing when it was deleted.
	collectGarbage(t, name)
	return name
}

// deleteAllPolicies deletes every policy of namespace ns, sixteen at a
// time, and waits until none is left. One DeleteCollection of thousands of
// policies deletes them one by one and timed out part way on a loaded API
// server; the policies it left, their fleet gone, kept the operator
// writing their status for minutes while the next tests' policies waited
// behind them.
func deleteAllPolicies(t testing.TB, ns string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 5*time.Minute, "every policy of namespace "+ns+" deleted", func() error {
		var left v1alpha1.RateLimitPolicyList
		if err := k8s.List(ctx, &left, client.InNamespace(ns)); err != nil {
			return err
		}
		var g errgroup.Group
		g.SetLimit(16)
		for i := range left.Items {
			g.Go(func() error { return client.IgnoreNotFound(k8s.Delete(ctx, &left.Items[i])) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if err := k8s.List(ctx, &left, client.InNamespace(ns), client.Limit(1)); err != nil {
			return err
		}
		if len(left.Items) > 0 {
			return fmt.Errorf("%d policies left", 1+ptr.Deref(left.RemainingItemCount, 0))
		}
		return nil
	})
}

// ipBlock hands each test its own 127.0.N.0/24 for limiter "pods".
var ipBlock atomic.Int32

// The API server refuses loopback addresses in EndpointSlices, so "pods"
// get documentation addresses (TEST-NET, never routed) in their Pod and
// EndpointSlice objects, and podNetwork plays the cluster network: the
// operator's calls to a pod address reach the limiter process listening on
// its loopback stand-in. Everything else the operator does is unchanged.
var podNetwork = &fakeNetwork{routes: map[string]string{}}

type fakeNetwork struct {
	mu     sync.Mutex
	routes map[string]string // pod IP -> loopback IP
	next   int
}

// podIP allocates a pod address standing for loopback ip.
func (n *fakeNetwork) podIP(loopback string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	ip := fmt.Sprintf("198.51.%d.%d", 100+n.next/250, 1+n.next%250)
	n.routes[ip] = loopback
	return ip
}

func (n *fakeNetwork) client() *http.Client {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				n.mu.Lock()
				lo, ok := n.routes[host]
				n.mu.Unlock()
				if !ok {
					return nil, fmt.Errorf("no route to %s in the test pod network", host)
				}
				return dialer.DialContext(ctx, network, net.JoinHostPort(lo, port))
			},
		},
	}
}

// limiterProc is one real limiter process standing in for a pod.
type limiterProc struct {
	ip, podIP                     string
	httpAddr, grpcAddr, adminAddr string
	args                          []string
	env                           []string // added to the test's environment
	tlsCert, tlsKey               string   // the admin plane's certificate and key files
	cmd                           *exec.Cmd
	log                           *bytes.Buffer
	mu                            sync.Mutex
}

// freePort finds a port free on every address given.
func freePort(t testing.TB, ips ...string) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		var held []net.Listener
		for _, ip := range ips[1:] {
			l2, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l2)
		}
		l.Close()
		for _, h := range held {
			h.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on all addresses")
	return 0
}

// fleetPods starts n limiter processes for a fleet, on distinct loopback
// IPs sharing one HTTP and one gRPC port, and creates the Pods and the
// EndpointSlice that point at them.
func fleetPods(t testing.TB, fleet *v1alpha1.LimiterFleet, n int) []*limiterProc {
	t.Helper()
	return fleetPodsWithStore(t, fleet, n, "memory")
}

// fleetPodsWithStore is fleetPods with the limiters' --store.
func fleetPodsWithStore(t testing.TB, fleet *v1alpha1.LimiterFleet, n int, store string) []*limiterProc {
	t.Helper()
	return fleetPodsWithArgs(t, fleet, n, store)
}

// fleetPodsWithArgs is fleetPodsWithStore with more limiter arguments. The
// limiters also get the --top-descriptor* arguments the fleet's Deployment
// renders.
func fleetPodsWithArgs(t testing.TB, fleet *v1alpha1.LimiterFleet, n int, store string, extra ...string) []*limiterProc {
	t.Helper()
	return fleetPodsWithEnv(t, fleet, n, store, nil, extra...)
}

// fleetPodsWithEnv is fleetPodsWithArgs with env (NAME=value) added to
// each limiter's environment.
func fleetPodsWithEnv(t testing.TB, fleet *v1alpha1.LimiterFleet, n int, store string, env []string, extra ...string) []*limiterProc {
	t.Helper()
	for _, a := range resources.LimiterArgs(betaOf(fleet), store) {
		if strings.HasPrefix(a, "--top-") {
			extra = append(extra, a)
		}
	}
	block := 100 + ipBlock.Add(1)
	var ips []string
	for i := range n {
		ips = append(ips, fmt.Sprintf("127.0.%d.%d", block, i+1))
	}
	httpPort, grpcPort, adminPort := freePort(t, ips...), 0, 0
	for grpcPort == 0 || grpcPort == httpPort {
		grpcPort = freePort(t, ips...)
	}
	for adminPort == 0 || adminPort == httpPort || adminPort == grpcPort {
		adminPort = freePort(t, ips...)
	}
	cm := fleet.Namespace + "/" + resources.SnapshotConfigMapName(betaOf(fleet))
	certFile, keyFile := adminTLSFiles(t, fleet)
	var procs []*limiterProc
	for _, ip := range ips {
		p := &limiterProc{
			ip:        ip,
			podIP:     podNetwork.podIP(ip),
			httpAddr:  net.JoinHostPort(ip, strconv.Itoa(httpPort)),
			grpcAddr:  net.JoinHostPort(ip, strconv.Itoa(grpcPort)),
			adminAddr: net.JoinHostPort(ip, strconv.Itoa(adminPort)),
			env:       env,
			tlsCert:   certFile,
			tlsKey:    keyFile,
		}
		p.args = []string{"--snapshot-configmap", cm, "--kubeconfig", kubeconfig, "--store", store,
			"--http-addr", p.httpAddr, "--grpc-addr", p.grpcAddr, "--admin-addr", p.adminAddr, "--admin-auth", "kubernetes",
			"--admin-tls-cert", certFile, "--admin-tls-key", keyFile}
		p.args = append(p.args, extra...)
		p.start(t)
		t.Cleanup(p.stop)
		procs = append(procs, p)
	}
	ctx := context.Background()
	var eps []discoveryv1.Endpoint
	for i, p := range procs {
		// The fleet's own pod, as its Deployment's ReplicaSet makes it.
		pod := limiterPod(t, fleet, fmt.Sprintf("%s-%d", resources.LimiterName(betaOf(fleet)), i), p.podIP, fleetReplicaSet(t, fleet))
		eps = append(eps, discoveryv1.Endpoint{
			Addresses:  []string{p.podIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		})
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: resources.LimiterName(betaOf(fleet)) + "-abcde",
			Labels: endpointSliceLabels(fleet)},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To(int32(httpPort)), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("grpc"), Port: ptr.To(int32(grpcPort)), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("admin"), Port: ptr.To(int32(adminPort)), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	if err := k8s.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	return procs
}

// endpointSliceLabels are the labels the endpoint controller gives the
// slices of the fleet's limiter Service: the Service's own, and its name.
func endpointSliceLabels(fleet *v1alpha1.LimiterFleet) map[string]string {
	l := resources.LimiterLabels(betaOf(fleet))
	l[discoveryv1.LabelServiceName] = resources.LimiterName(betaOf(fleet))
	return l
}

func (p *limiterProc) start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = &bytes.Buffer{}
	p.cmd = exec.Command(limiterBin, p.args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "limiter "+p.httpAddr+" listening", func() error {
		resp, err := http.Get("http://" + p.httpAddr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

func (p *limiterProc) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// check sends one HTTP check and returns the status code.
func (p *limiterProc) check(t testing.TB, domain string, kv ...string) int {
	t.Helper()
	var entries []string
	for i := 0; i+1 < len(kv); i += 2 {
		entries = append(entries, fmt.Sprintf(`{"key":%q,"value":%q}`, kv[i], kv[i+1]))
	}
	body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[%s]}]}`, domain, strings.Join(entries, ","))
	resp, err := http.Post("http://"+p.httpAddr+"/v1/ratelimit/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// metric returns the sum of a metric's samples that carry all the given
// labels (name, value pairs), from a limiter's /metrics.
func (p *limiterProc) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	resp, err := getWithToken("https://"+p.adminAddr+"/metrics", metricsToken)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s/metrics: %s", p.adminAddr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics of %s: %v", p.adminAddr, err)
	}
	sum := 0.0
	for _, m := range mfs[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && have[labels[i]] == labels[i+1]
		}
		if ok {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return sum
}

// admin returns what a limiter's admin snapshot endpoint answers.
func (p *limiterProc) admin() (limiterwire.Snapshot, error) {
	var v limiterwire.Snapshot
	resp, err := adminGet("https://" + p.adminAddr + limiterwire.SnapshotPath)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s answered %s", limiterwire.SnapshotPath, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// loaded returns the snapshot version a limiter reports.
func (p *limiterProc) loaded(t testing.TB) string {
	t.Helper()
	v, _ := p.admin()
	return v.Version
}

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func policyCondition(t testing.TB, ns, name, typ string) (*metav1.Condition, *v1alpha1.RateLimitPolicy) {
	t.Helper()
	c, p, _ := policyConditionErr(ns, name, typ)
	return c, p
}

// policyConditionErr is policyCondition with the error of reading the
// policy (through the conversion webhook: it is stored as v1beta1).
func policyConditionErr(ns, name, typ string) (*metav1.Condition, *v1alpha1.RateLimitPolicy, error) {
	p := &v1alpha1.RateLimitPolicy{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		return nil, nil, err
	}
	return condition(p.Status.Conditions, typ), p, nil
}

// waitPolicy waits until a policy's condition has the given status (and,
// when reason is not empty, reason) for its current generation.
func waitPolicy(t testing.TB, ns, name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.RateLimitPolicy {
	t.Helper()
	var got *v1alpha1.RateLimitPolicy
	eventually(t, 30*time.Second, fmt.Sprintf("policy %s/%s %s=%s", ns, name, typ, status), func() error {
		c, p, err := policyConditionErr(ns, name, typ)
		switch {
		case err != nil:
			return fmt.Errorf("reading the policy: %w", err)
		case c == nil:
			var have []string
			for _, o := range p.Status.Conditions {
				have = append(have, fmt.Sprintf("%s=%s (%s): %s", o.Type, o.Status, o.Reason, o.Message))
			}
			return fmt.Errorf("no %s condition yet; conditions %v; status.fleets %+v", typ, have, p.Status.Fleets)
		case c.ObservedGeneration != p.Generation:
			return fmt.Errorf("condition is for generation %d, policy is at %d", c.ObservedGeneration, p.Generation)
		case c.Status != status || (reason != "" && c.Reason != reason):
			return fmt.Errorf("%s=%s (%s): %s", typ, c.Status, c.Reason, c.Message)
		}
		got = p
		return nil
	})
	return got
}

func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// fleetReplicaSet returns the controller reference to a ReplicaSet of the
// fleet's limiter Deployment, as the Deployment controller (which envtest
// doesn't run) would make it: it waits for the operator to render the
// Deployment, and creates the ReplicaSet once.
func fleetReplicaSet(t testing.TB, fleet *v1alpha1.LimiterFleet) []metav1.OwnerReference {
	t.Helper()
	ctx := context.Background()
	dep := &appsv1.Deployment{}
	eventually(t, 30*time.Second, "the fleet's limiter Deployment", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: resources.LimiterName(betaOf(fleet))}, dep)
	})
	rs := &appsv1.ReplicaSet{}
	key := client.ObjectKey{Namespace: fleet.Namespace, Name: resources.LimiterName(betaOf(fleet)) + "-test"}
	if err := k8s.Get(ctx, key, rs); apierrors.IsNotFound(err) {
		rs = &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: dep.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
			Spec: appsv1.ReplicaSetSpec{Replicas: dep.Spec.Replicas, Selector: dep.Spec.Selector, Template: dep.Spec.Template},
		}
		if err := k8s.Create(ctx, rs); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
}

// limiterPod creates a ready Pod with the fleet's limiter labels at podIP,
// with the given owner references (fleetReplicaSet's for one of the
// fleet's own pods, none for a rogue one).
func limiterPod(t testing.TB, fleet *v1alpha1.LimiterFleet, name, podIP string, owners []metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: name,
			Labels: resources.LimiterSelectorLabels(betaOf(fleet)), OwnerReferences: owners},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "limiter", Image: "sluice-limiter:test"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}
