package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// cluster is the one-node cluster make e2e brought up, as the tests reach
// it: client-go and controller-runtime clients, and the helm and kubectl
// binaries a user runs.
type cluster struct {
	root       string            // the repository
	kubeconfig string            // the admin kubeconfig
	kubectlBin string            // bin/kubectl
	helmBin    string            // bin/helm
	images     map[string]string // "redis" -> "e2e.sluice.local/redis:7.0.15"
	cs         kubernetes.Interface
	c          client.Client
}

// containerd is the address of the containerd of node, from
// SLUICE_E2E_CONTAINERD ("NODE=SOCKET ...", hack/cluster/up.sh), or of the
// one node's (CONTAINERD_ADDRESS) under an older up.sh.
func (c *cluster) containerd(t *testing.T, node string) string {
	t.Helper()
	for _, kv := range strings.Fields(os.Getenv("SLUICE_E2E_CONTAINERD")) {
		if n, sock, ok := strings.Cut(kv, "="); ok && n == node {
			return sock
		}
	}
	if os.Getenv("SLUICE_E2E_CONTAINERD") == "" && os.Getenv("CONTAINERD_ADDRESS") != "" {
		return os.Getenv("CONTAINERD_ADDRESS")
	}
	t.Fatalf("no containerd for node %q in SLUICE_E2E_CONTAINERD=%q", node, os.Getenv("SLUICE_E2E_CONTAINERD"))
	return ""
}

// nodes is how many nodes hack/cluster/up.sh started (SLUICE_E2E_NODES;
// 1 under an older up.sh).
func nodes(t *testing.T) int {
	t.Helper()
	v := os.Getenv("SLUICE_E2E_NODES")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("SLUICE_E2E_NODES=%q: want a number of nodes", v)
	}
	return n
}

// connect reaches the cluster that hack/cluster/up.sh described in the
// environment, or skips the test when there is none (unless make e2e said
// one is required).
func connect(t *testing.T) *cluster {
	t.Helper()
	dir, kubeconfig := os.Getenv("SLUICE_E2E_CLUSTER_DIR"), os.Getenv("KUBECONFIG")
	if dir == "" || kubeconfig == "" {
		msg := "no cluster: these tests run on the one-node cluster that `make e2e` starts " +
			"(or `make cluster-up`, then `. .cluster/env` and go test ./test/e2e/)"
		if os.Getenv("SLUICE_E2E_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		root:       root,
		kubeconfig: kubeconfig,
		kubectlBin: filepath.Join(root, "bin", "kubectl"),
		helmBin:    filepath.Join(root, "bin", "helm"),
		images:     map[string]string{},
	}
	list, err := os.ReadFile(os.Getenv("SLUICE_E2E_IMAGES"))
	if err != nil {
		t.Fatalf("the cluster's image list (SLUICE_E2E_IMAGES): %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(list))
	for sc.Scan() {
		ref := strings.TrimSpace(sc.Text())
		if ref == "" {
			continue
		}
		// Named by the path under the registry: e2e.sluice.local/redis:7.0.15
		// is redis, e2e.sluice.local/previous/sluice-operator:ca0d833 (the
		// previous release's, hack/cluster/build.sh) previous/sluice-operator.
		_, name, _ := strings.Cut(ref, "/")
		if i := strings.LastIndex(name, ":"); i >= 0 {
			name = name[:i]
		}
		c.images[name] = ref
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	if c.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if c.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return c
}

// image is the reference of one of the cluster's images, by name.
func (c *cluster) image(t *testing.T, name string) string {
	t.Helper()
	ref, ok := c.images[name]
	if !ok {
		t.Fatalf("no %s image in the cluster's list: %v", name, c.images)
	}
	return ref
}

// previousImage is the previous release's image of name (sluice-operator,
// sluice-limiter), and whether the cluster has it: not when this clone's
// history lacks the commit (hack/cluster/build.sh says so).
func (c *cluster) previousImage(name string) (string, bool) {
	ref, ok := c.images["previous/"+name]
	return ref, ok
}

// cmd runs a binary with the cluster's kubeconfig, stdin from stdin, and
// returns its stdout and stderr.
func (c *cluster) cmd(stdin, bin string, args ...string) (string, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// kubectl runs kubectl and fails the test if it fails; it returns stdout.
func (c *cluster) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := c.cmd("", c.kubectlBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// apply runs kubectl apply -f - on manifests.
func (c *cluster) apply(t *testing.T, manifests string) string {
	t.Helper()
	out, _, err := c.cmd(manifests, c.kubectlBin, "apply", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// helm runs helm and fails the test if it fails; it returns stdout and
// stderr (where Helm prints the API server's warnings).
func (c *cluster) helm(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out, stderr, err := c.cmd("", c.helmBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out, stderr
}

// exec runs a command in a pod's first container and returns its stdout.
func (c *cluster) exec(t *testing.T, ns, pod string, args ...string) []byte {
	t.Helper()
	out, err := c.tryExec(ns, pod, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryExec is exec returning what went wrong.
func (c *cluster) tryExec(ns, pod string, args ...string) ([]byte, error) {
	out, _, err := c.cmd("", c.kubectlBin, append([]string{"exec", "-n", ns, pod, "--"}, args...)...)
	return []byte(out), err
}

// execJSON runs a command in a pod and decodes its JSON output into v.
func (c *cluster) execJSON(t *testing.T, v any, ns, pod string, args ...string) {
	t.Helper()
	if err := c.tryExecJSON(v, ns, pod, args...); err != nil {
		t.Fatal(err)
	}
}

// tryExecJSON is execJSON for what is told, never judged: it returns what
// went wrong.
func (c *cluster) tryExecJSON(v any, ns, pod string, args ...string) error {
	out, err := c.tryExec(ns, pod, args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// waitFor polls f every 250ms until it says done, and fails the test after
// timeout with f's last word on what it waits for.
func waitFor(t *testing.T, what string, timeout time.Duration, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, msg := f()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %s", what, timeout, msg)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// restricted is a container security context that the restricted Pod
// Security profile admits.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](65532),
		RunAsGroup:               ptr.To[int64](65532),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// restrictedNamespace creates ns (if it does not exist) and labels it to
// enforce, warn about and audit the restricted Pod Security profile.
func (c *cluster) restrictedNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := c.c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c.kubectl(t, "label", "--overwrite", "namespace", ns,
		"pod-security.kubernetes.io/enforce=restricted",
		"pod-security.kubernetes.io/warn=restricted",
		"pod-security.kubernetes.io/audit=restricted")
}

// runPod creates a pod of one container and waits until it is ready.
func (c *cluster) runPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := c.cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	waitFor(t, "pod "+pod.Namespace+"/"+pod.Name+" ready", 2*time.Minute, func() (bool, string) {
		var err error
		if got, err = c.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, podState(got)
	})
	return got
}

// clientPod runs the e2e client as a pod that waits for kubectl exec, on
// node 1.
func (c *cluster) clientPod(t *testing.T, ns, name string) {
	t.Helper()
	var onFirst map[string]string
	if n := firstNode(); n != "" {
		// On the control plane's node, which faults never stop or drain.
		onFirst = map[string]string{corev1.LabelHostname: n}
	}
	c.runPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector:                  onFirst,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "client", Image: c.image(t, "e2e-client"), ImagePullPolicy: corev1.PullNever,
				Args: []string{"wait"}, SecurityContext: restricted(),
			}},
		},
	})
}

// podState says why a pod is not ready: its phase and each container's
// waiting or terminated reason.
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(", %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf(", %s terminated: %s %s", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.Message)
		case !cs.Ready:
			s += ", " + cs.Name + " not ready"
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			s += fmt.Sprintf(", %s: %s", cond.Type, cond.Message)
		}
	}
	return s
}

// condition is the status and reason of a condition, "Unknown" when unset.
func condition(conds []metav1.Condition, typ string) (metav1.ConditionStatus, string) {
	cond := meta.FindStatusCondition(conds, typ)
	if cond == nil {
		return metav1.ConditionUnknown, "not set"
	}
	return cond.Status, cond.Reason + ": " + cond.Message
}

// fleet reads a LimiterFleet.
// It reads the storage version and converts it here, with the webhook's
// own code: a read must not need the operator (faults delete it, helm
// uninstall removes it); the journey's conversion step proves the webhook.
func (c *cluster) fleet(t *testing.T, ns, name string) *v1alpha1.LimiterFleet {
	t.Helper()
	hub := &v1beta1.LimiterFleet{}
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, hub); err != nil {
		t.Fatal(err)
	}
	f := &v1alpha1.LimiterFleet{}
	if err := f.ConvertFrom(hub); err != nil {
		t.Fatalf("converting fleet %s/%s to v1alpha1: %v", ns, name, err)
	}
	return f
}

// policy reads a RateLimitPolicy.
// It reads the storage version, as fleet does.
func (c *cluster) policy(t *testing.T, ns, name string) *v1alpha1.RateLimitPolicy {
	t.Helper()
	hub := &v1beta1.RateLimitPolicy{}
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, hub); err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.RateLimitPolicy{}
	if err := p.ConvertFrom(hub); err != nil {
		t.Fatalf("converting policy %s/%s to v1alpha1: %v", ns, name, err)
	}
	return p
}

// since formats the time from start to now, to the tenth of a second.
func since(start time.Time) string { return time.Since(start).Round(100 * time.Millisecond).String() }

// followedLog is a pod's log as kubectl logs -f would print it, gathered
// in the background until the pod's container ends.
type followedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
	err error
}

// followLog follows pod's log from now on; its tail stays readable after
// the pod is gone.
func (c *cluster) followLog(t *testing.T, namespace, pod string) *followedLog {
	t.Helper()
	l := &followedLog{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		r, err := c.cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true, SinceSeconds: ptr.To[int64](5)}).Stream(ctx)
		if err == nil {
			defer r.Close()
			var chunk [4096]byte
			for {
				n, rerr := r.Read(chunk[:])
				l.mu.Lock()
				l.buf.Write(chunk[:n])
				l.mu.Unlock()
				if rerr != nil {
					err = rerr
					break
				}
			}
		}
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
	}()
	return l
}

// tail is the log's last n lines, and how following it ended.
func (l *followedLog) tail(n int) string {
	if l == nil {
		return "(not followed)"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.buf.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + fmt.Sprintf("\n(following ended: %v)", l.err)
}
