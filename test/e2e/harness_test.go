package e2e

// The harness's own attacks (issue #24): hack/cluster runs as root on a
// shared machine, and must hold no door open to the machine's other users.
// make e2e runs the first four on the cluster it brought up, before the
// journey, and TestAttackDownRemovesForeignRules after hack/cluster/down.sh
// (SLUICE_E2E_AFTER_DOWN=1), on the foreign rules hack/cluster/e2e.sh
// planted before up.sh.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/controllers/resources"
)

const (
	// otherUser is a local user that is not root and not in the cluster.
	otherUser = "nobody"
	// clusterBridge is hack/cluster/lib.sh's BRIDGE: the only address other
	// than loopback the cluster's processes may listen on is its.
	clusterBridge = "sluice0"
)

// harnessDir is the work dir of the cluster make e2e brought up, which
// these tests inspect as root; without one they skip (or fail, under
// SLUICE_E2E_REQUIRED=1), as connect does.
func harnessDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SLUICE_E2E_CLUSTER_DIR")
	if dir == "" {
		msg := "no cluster: these tests run on the one-node cluster that `make e2e` starts"
		if os.Getenv("SLUICE_E2E_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the harness's tests run as root, as make e2e does: they look at the cluster's files and sockets")
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Fatalf("runuser: %v", err)
	}
	return dir
}

// asOtherUser runs a command as otherUser and returns its combined output
// and whether it succeeded.
func asOtherUser(args ...string) (string, bool) {
	out, err := exec.Command("runuser", append([]string{"-u", otherUser, "--"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// TestAttackOtherUserReadsClusterKeys: a local user reads the admin
// kubeconfig (system:masters), a CA key or the service-account signing key,
// and owns the cluster. Every file with a key is root's and 0600, in 0700
// directories, and the work dir is 0700: the other user gets nothing.
func TestAttackOtherUserReadsClusterKeys(t *testing.T) {
	dir := harnessDir(t)
	var secrets []string
	kubeconfigs, _ := filepath.Glob(filepath.Join(dir, "*.kubeconfig"))
	keys, _ := filepath.Glob(filepath.Join(dir, "pki", "*.key"))
	secrets = append(secrets, kubeconfigs...)
	secrets = append(secrets, keys...)
	if len(kubeconfigs) == 0 || len(keys) == 0 {
		t.Fatalf("no kubeconfigs or keys in %s: %v %v", dir, kubeconfigs, keys)
	}
	for _, f := range secrets {
		if out, ok := asOtherUser("cat", f); ok {
			t.Errorf("%s read %s (%d bytes)", otherUser, f, len(out))
		}
	}
	if out, ok := asOtherUser("ls", dir); ok {
		t.Errorf("%s listed %s: %s", otherUser, dir, strings.ReplaceAll(out, "\n", " "))
	}
	// Whatever the directory above allows: the modes themselves.
	for _, f := range append(secrets, filepath.Join(dir, "pki", "ca.crt")) {
		checkMode(t, f, 0o600)
	}
	for _, d := range []string{dir, filepath.Join(dir, "pki"), filepath.Join(dir, "run"), filepath.Join(dir, "state")} {
		checkMode(t, d, 0o700)
	}
}

// checkMode fails the test unless path is root's and has no permission
// beyond max.
func checkMode(t *testing.T, path string, max fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if extra := fi.Mode().Perm() &^ max; extra != 0 {
		t.Errorf("%s is %v: %v more than %v", path, fi.Mode().Perm(), extra, max)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 {
		t.Errorf("%s is owned by uid %d, not root", path, uid)
	}
}

// TestAttackEtcdWithoutClientCert: a local user reads every Secret of the
// cluster from etcd, or writes itself a ClusterRoleBinding, by talking to
// etcd on 127.0.0.1. etcd answers only TLS with a client certificate of its
// own CA: plain HTTP, TLS without a certificate, and a certificate of the
// cluster's CA (which the CSR signers also use) all fail.
func TestAttackEtcdWithoutClientCert(t *testing.T) {
	dir := harnessDir(t)
	addr := "127.0.0.1:" + envOr("ETCD_PORT", "23790")
	// Count the keys under /registry/: any answer to it is the attack.
	body := `{"key":"L3JlZ2lzdHJ5Lw==","range_end":"L3JlZ2lzdHJ5MA==","count_only":true}`
	try := func(how string, c *http.Client, scheme string) {
		t.Helper()
		resp, err := c.Post(scheme+"://"+addr+"/v3/kv/range", "application/json", strings.NewReader(body))
		if err != nil {
			t.Logf("%s: refused: %v", how, err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"header"`)) {
			t.Errorf("%s: etcd answered a range over /registry/: %s", how, b)
			return
		}
		t.Logf("%s: refused: %s %s", how, resp.Status, bytes.TrimSpace(b))
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	try("plain HTTP", plain, "http")
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the attacker's client
	}}
	try("TLS without a client certificate", noCert, "https")
	// The admin's certificate (system:masters, the cluster's CA) is no key
	// to etcd either.
	if cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "pki", "admin.crt"), filepath.Join(dir, "pki", "admin.key")); err != nil {
		t.Errorf("the admin's certificate: %v", err)
	} else {
		clusterCA := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, //nolint:gosec // the attacker's client
				// Sent whatever CAs etcd says it accepts.
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
			},
		}}
		try("TLS with a certificate of the cluster's CA", clusterCA, "https")
	}
	// And etcd does answer the API server's certificate: the refusals above
	// are etcd's, not a dead port's.
	caPEM, err := os.ReadFile(filepath.Join(dir, "pki", "etcd-ca.crt"))
	if err != nil {
		t.Fatalf("etcd's CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "pki", "apiserver-etcd-client.crt"), filepath.Join(dir, "pki", "apiserver-etcd-client.key"))
	if err != nil {
		t.Fatalf("the API server's etcd client certificate: %v", err)
	}
	apiserver := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}
	resp, err := apiserver.Post("https://"+addr+"/v3/kv/range", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("etcd refused the API server's certificate: %v", err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd refused the API server's certificate: %s %s", resp.Status, b)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// TestAttackClusterListensOnHostAddress: a machine on the host's network
// reaches the API server, kubelet or etcd on the host's routable address.
// Every socket the cluster's processes listen on is on loopback or on the
// cluster's own bridge, and the API server's port on each of the host's
// other addresses takes no connection.
func TestAttackClusterListensOnHostAddress(t *testing.T) {
	dir := harnessDir(t)
	pids := map[int]string{}
	pidFiles, _ := filepath.Glob(filepath.Join(dir, "run", "*.pid"))
	for _, f := range pidFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		pids[pid] = strings.TrimSuffix(filepath.Base(f), ".pid")
	}
	if len(pids) == 0 {
		t.Fatalf("no processes in %s/run/*.pid", dir)
	}
	bridgeAddrs := map[string]bool{}
	if ifc, err := net.InterfaceByName(clusterBridge); err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				bridgeAddrs[ipn.IP.String()] = true
			}
		}
	}
	out, err := exec.Command("ss", "-H", "-l", "-n", "-t", "-u", "-p").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v: %s", err, out)
	}
	pidRE := regexp.MustCompile(`pid=(\d+)`)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		local := f[4]
		var names []string
		for _, m := range pidRE.FindAllStringSubmatch(strings.Join(f[6:], " "), -1) {
			pid, _ := strconv.Atoi(m[1])
			if name, ok := pids[pid]; ok {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			continue
		}
		seen[names[0]] = true
		host := local[:strings.LastIndex(local, ":")]
		host = strings.Trim(host, "[]")
		host, _, _ = strings.Cut(host, "%")
		ip := net.ParseIP(host)
		switch {
		case ip != nil && ip.IsLoopback():
			t.Logf("%s listens on %s %s (loopback)", names[0], f[0], local)
		case ip != nil && bridgeAddrs[ip.String()]:
			t.Logf("%s listens on %s %s (the cluster's bridge)", names[0], f[0], local)
		default:
			t.Errorf("%s listens on %s %s: reachable from other machines", names[0], f[0], local)
		}
	}
	for _, must := range []string{"etcd", "kube-apiserver", "kubelet"} {
		if !seen[must] {
			t.Errorf("%s listens on nothing that ss shows:\n%s", must, out)
		}
	}
	// The API server's port, on every other address of the host.
	cfg, err := clientcmd.LoadFromFile(filepath.Join(dir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	var port string
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		port = u.Port()
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	dialed := 0
	for _, ifc := range ifaces {
		if ifc.Name == clusterBridge || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.IP.IsGlobalUnicast() || bridgeAddrs[ipn.IP.String()] {
				continue
			}
			for _, p := range []string{port, "10250"} {
				target := net.JoinHostPort(ipn.IP.String(), p)
				dialed++
				c, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err == nil {
					c.Close()
					t.Errorf("%s (%s) takes connections", target, ifc.Name)
					continue
				}
				t.Logf("%s (%s): %v", target, ifc.Name, err)
			}
		}
	}
	if dialed == 0 {
		t.Log("the host has no routable address but the cluster's")
	}
}

// TestAttackOtherUserWritesPersistentVolume: a local user plants or reads
// Redis's data in the PersistentVolumes' directories (local-path's default
// is 0777). A claim of the default StorageClass (local-path-provisioner,
// hack/cluster/manifests/local-path.yaml) is provisioned when its pod is
// scheduled: its directory is the Redis pods' user's (resources.RedisUser)
// and 0700, other users can't write it, and it goes when the claim does.
func TestAttackOtherUserWritesPersistentVolume(t *testing.T) {
	harnessDir(t)
	c := connect(t)
	ctx := context.Background()
	const ns = "e2e-volume"
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	defer func() {
		_ = c.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	}()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := c.cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "user", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: c.image(t, "pause"),
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		},
	}
	if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pv *corev1.PersistentVolume
	waitFor(t, "the claim bound to a provisioned volume", 3*time.Minute, func() (bool, string) {
		got, err := c.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.Status.Phase != corev1.ClaimBound {
			return false, fmt.Sprintf("claim %s (class %v)", got.Status.Phase, ptr.Deref(got.Spec.StorageClassName, ""))
		}
		pv, err = c.cs.CoreV1().PersistentVolumes().Get(ctx, got.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if pv.Spec.StorageClassName != "local-path" || pv.Spec.HostPath == nil || pv.Spec.NodeAffinity == nil {
		t.Fatalf("%s: class %q, hostPath %v, node affinity %v: want local-path's hostPath volume on one node",
			pv.Name, pv.Spec.StorageClassName, pv.Spec.HostPath, pv.Spec.NodeAffinity)
	}
	path := pv.Spec.HostPath.Path
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("%s: %v", pv.Name, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if perm := fi.Mode().Perm(); perm&0o077 != 0 || fi.Mode()&fs.ModeSticky != 0 {
		t.Errorf("%s: %s is %v (%v): open to other users", pv.Name, path, fi.Mode(), perm)
	}
	if int64(st.Uid) != resources.RedisUser || int64(st.Gid) != resources.RedisUser {
		t.Errorf("%s: %s is owned by %d:%d, not the Redis pods' %d", pv.Name, path, st.Uid, st.Gid, resources.RedisUser)
	}
	if out, ok := asOtherUser("touch", filepath.Join(path, "planted-by-"+otherUser)); ok {
		t.Errorf("%s wrote into %s", otherUser, path)
	} else {
		t.Logf("%s: %s", pv.Name, out)
	}
	// Reclaim policy Delete: the volume-helper removes the directory.
	if err := c.cs.CoreV1().Pods(ns).Delete(ctx, "user", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := c.cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the released volume and its directory removed", 3*time.Minute, func() (bool, string) {
		_, err := c.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		_, serr := os.Stat(path)
		return apierrors.IsNotFound(err) && os.IsNotExist(serr), fmt.Sprintf("volume: %v; %s: %v", err, path, serr)
	})
}

// The foreign rules hack/cluster/e2e.sh plants before up.sh and removes
// after this test: iptables chains and rules named like the cluster's
// (KUBE-*, CNI-*) but not its, and a rule of no one's in FORWARD.
var foreignRules = []struct{ tool, table, chain, match string }{
	{"iptables", "filter", "FORWARD", "--comment not-ours -j ACCEPT"},
	{"iptables", "filter", "INPUT", "-j KUBE-FOREIGN"},
	{"iptables", "filter", "KUBE-FOREIGN", "--comment not-ours -j RETURN"},
	{"iptables", "nat", "POSTROUTING", "-j CNI-FOREIGN"},
	{"iptables", "nat", "CNI-FOREIGN", "--comment not-ours -j RETURN"},
	{"ip6tables", "filter", "KUBE-FOREIGN", "--comment not-ours -j RETURN"},
}

// TestAttackDownRemovesForeignRules: hack/cluster/down.sh deleted every
// KUBE-*/CNI-* chain and rule of the machine, another cluster's or
// firewall's too. After down.sh, the foreign rules planted before up.sh are
// all there, and nothing else of the cluster is: no KUBE-*/CNI-* chain
// but the foreign ones, no bridge.
func TestAttackDownRemovesForeignRules(t *testing.T) {
	if os.Getenv("SLUICE_E2E_AFTER_DOWN") != "1" {
		t.Skip("runs after hack/cluster/down.sh, on the rules hack/cluster/e2e.sh planted before up.sh (SLUICE_E2E_AFTER_DOWN=1)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("runs as root, as make e2e does")
	}
	for _, r := range foreignRules {
		out, err := exec.Command(r.tool, "-t", r.table, "-S", r.chain).CombinedOutput()
		if err != nil {
			t.Errorf("%s -t %s -S %s: %v: %s (the foreign chain is gone)", r.tool, r.table, r.chain, err, bytes.TrimSpace(out))
			continue
		}
		if !strings.Contains(string(out), r.match) {
			t.Errorf("%s -t %s %s: no rule with %q left:\n%s", r.tool, r.table, r.chain, r.match, out)
		}
	}
	foreign := map[string]bool{"KUBE-FOREIGN": true, "CNI-FOREIGN": true}
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			out, err := exec.Command(tool+"-save", "-t", table).CombinedOutput()
			if err != nil {
				t.Logf("%s-save -t %s: %v: %s", tool, table, err, bytes.TrimSpace(out))
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if !strings.HasPrefix(line, ":") {
					continue
				}
				chain := strings.Fields(line[1:])[0]
				if (strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-")) && !foreign[chain] {
					t.Errorf("%s table %s: the cluster's chain %s is left", tool, table, chain)
				}
			}
		}
	}
	if _, err := net.InterfaceByName(clusterBridge); err == nil {
		t.Errorf("the bridge %s is left", clusterBridge)
	}
}

// TestAttackNeighbourReachesTheCluster: a machine on the host's network
// routes the cluster's addresses through the host (or dials the host's
// own) and talks to the API server, kubelet, a pod or a Service. The
// neighbour here is a network namespace on a veth of its own, whose default
// route is the host; it reaches a port the host opens to it (so the
// refusals below are the cluster's, not a broken neighbour), and nothing of
// the cluster.
func TestAttackNeighbourReachesTheCluster(t *testing.T) {
	dir := harnessDir(t)
	c := connect(t)
	const hostSide, hostIP, nbIP = "sl-nb0", "198.51.100.1", "198.51.100.2"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// The neighbour's namespace is a process's, named nowhere: ip netns add
	// would bind-mount /run/netns over the pods' namespaces in it.
	_ = exec.Command("ip", "link", "del", hostSide).Run()
	holder := exec.Command("unshare", "--net", "sleep", "infinity")
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare --net: %v", err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	pid := strconv.Itoa(holder.Process.Pid)
	inNS := func(args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"-t", pid, "-n"}, args...)...)
	}
	waitFor(t, "the neighbour's network namespace", time.Minute, func() (bool, string) {
		self, _ := os.Readlink("/proc/self/ns/net")
		its, err := os.Readlink("/proc/" + pid + "/ns/net")
		return err == nil && its != self, fmt.Sprintf("%s's is %s (ours %s, %v)", pid, its, self, err)
	})
	ip("link", "add", hostSide, "type", "veth", "peer", "name", "eth0", "netns", pid)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostSide).Run() })
	ip("addr", "add", hostIP+"/30", "dev", hostSide)
	ip("link", "set", hostSide, "up")
	for _, args := range [][]string{
		{"ip", "addr", "add", nbIP + "/30", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "link", "set", "lo", "up"},
		{"ip", "route", "add", "default", "via", hostIP},
	} {
		if out, err := inNS(args...).CombinedOutput(); err != nil {
			t.Fatalf("in the neighbour's namespace, %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	// dial connects from the neighbour; a DROP shows as the timeout.
	dial := func(target string) error {
		h, p, _ := net.SplitHostPort(target)
		out, err := inNS("timeout", "10", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", h, p)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v %s", err, bytes.TrimSpace(out))
		}
		return nil
	}
	ln, err := net.Listen("tcp", hostIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	if err := dial(ln.Addr().String()); err != nil {
		t.Fatalf("the neighbour can't reach the host's %s: %v", ln.Addr(), err)
	}

	// The cluster's addresses, which the neighbour's default route sends
	// to the host: the API server's and kubelet's ports on every address of
	// the host, the node's among them; a CoreDNS pod; the kubernetes and
	// kube-dns Services.
	cfg, err := clientcmd.LoadFromFile(filepath.Join(dir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	var port string
	for _, cl := range cfg.Clusters {
		u, err := url.Parse(cl.Server)
		if err != nil {
			t.Fatal(err)
		}
		port = u.Port()
	}
	var targets []string
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if ifc.Name == hostSide || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				targets = append(targets, net.JoinHostPort(ipn.IP.String(), port), net.JoinHostPort(ipn.IP.String(), "10250"))
			}
		}
	}
	pods, err := c.cs.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" {
			targets = append(targets, net.JoinHostPort(p.Status.PodIP, "53"))
		}
	}
	for _, svc := range []struct{ ns, name, port string }{{"default", "kubernetes", "443"}, {"kube-system", "kube-dns", "53"}} {
		s, err := c.cs.CoreV1().Services(svc.ns).Get(context.Background(), svc.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, net.JoinHostPort(s.Spec.ClusterIP, svc.port))
	}
	errs := make([]error, len(targets))
	done := make(chan int)
	for i, target := range targets {
		go func() { errs[i] = dial(target); done <- i }()
	}
	for range targets {
		<-done
	}
	for i, target := range targets {
		if errs[i] == nil {
			t.Errorf("the neighbour connected to %s", target)
		} else {
			t.Logf("the neighbour can't connect to %s: %v", target, errs[i])
		}
	}
}

// afterDown skips unless make e2e runs the test after hack/cluster/down.sh,
// with the machine's cluster lock held and no cluster up; it returns the
// directory of up.sh and down.sh.
func afterDown(t *testing.T) string {
	t.Helper()
	if os.Getenv("SLUICE_E2E_AFTER_DOWN") != "1" {
		t.Skip("runs after hack/cluster/down.sh, under make e2e's cluster lock (SLUICE_E2E_AFTER_DOWN=1)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("runs as root, as make e2e does")
	}
	// SLUICE_E2E_SCRIPTS: another tree's hack/cluster (such as the base
	// commit's, to show the attack there).
	if dir := os.Getenv("SLUICE_E2E_SCRIPTS"); dir != "" {
		return dir
	}
	dir, err := filepath.Abs("../../hack/cluster")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// upMustRefuse runs up.sh on a work dir of the test's, which must fail
// before it changes anything; it returns what up.sh said.
func upMustRefuse(t *testing.T, scripts, dir string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(scripts, "up.sh"))
	cmd.Env = append(os.Environ(), "CLUSTER_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil {
		// It is up: take it down again before failing.
		down := exec.Command(filepath.Join(scripts, "down.sh"))
		down.Env = cmd.Env
		downOut, _ := down.CombinedOutput()
		t.Fatalf("up.sh started a cluster in %s:\n%s\ndown.sh:\n%s", dir, out, downOut)
	}
	if _, err := net.InterfaceByName(clusterBridge); err == nil {
		t.Errorf("up.sh refused, but made the bridge %s", clusterBridge)
	}
	return string(out)
}

// TestUpRefusesBesideAnotherKubeProxy: with another kube-proxy's chains on
// the machine (nat KUBE-SERVICES), up.sh refuses, naming the chain, before
// it changes anything: its kube-proxy would rewrite that chain, and down.sh
// could not tell the other's rules from its own.
func TestUpRefusesBesideAnotherKubeProxy(t *testing.T) {
	scripts := afterDown(t)
	if out, err := exec.Command("iptables", "-t", "nat", "-N", "KUBE-SERVICES").CombinedOutput(); err != nil {
		t.Fatalf("iptables -t nat -N KUBE-SERVICES: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("iptables", "-t", "nat", "-X", "KUBE-SERVICES").Run() })
	out := upMustRefuse(t, scripts, filepath.Join(t.TempDir(), "cluster"))
	if !strings.Contains(out, "KUBE-SERVICES") || !strings.Contains(out, "another kube-proxy") {
		t.Errorf("up.sh's refusal doesn't name the chain and why:\n%s", out)
	}
}

// TestAttackOtherUserPlantsTheWorkDir: a local user who may write where
// the work dir goes (CLUSTER_DIR=/tmp/..., say) makes it first, a symbolic
// link to a directory of theirs or a directory they own, and root writes
// the cluster's keys where they read them. up.sh refuses either, naming it.
func TestAttackOtherUserPlantsTheWorkDir(t *testing.T) {
	scripts := afterDown(t)
	tmp := t.TempDir()
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if out := upMustRefuse(t, scripts, link); !strings.Contains(out, link+" is a symbolic link or not owned by root") {
		t.Errorf("up.sh's refusal of the symbolic link %s doesn't say so:\n%s", link, out)
	}
	theirs := filepath.Join(tmp, "theirs")
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if out := upMustRefuse(t, scripts, theirs); !strings.Contains(out, theirs+" is a symbolic link or not owned by root") {
		t.Errorf("up.sh's refusal of %s (nobody's) doesn't say so:\n%s", theirs, out)
	}
}
