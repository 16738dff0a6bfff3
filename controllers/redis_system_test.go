/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
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

	goredis "github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
)

// Redis pods in these tests are real cluster-enabled redis-server processes
// on hosts 200-250 of the test process's loopback /24 (internal/testnet), port 6379, started
// with the redis.conf the operator renders. The test creates their Pod
// objects with those addresses as status.podIP, as the kubelet would, and
// the operator forms and heals the cluster against them.

func init() { goredis.SetLogger(quietRedisLog{}) } // the tests' clients dial dead nodes on purpose

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// redisIP hands out hosts 200-250 of the process's loopback /24
// (testnet.IP) in turn. The tests run one at a time and stop their nodes at
// the end, and none holds more than 51 addresses, so an address comes round
// again only once it is free (-count=N). The /24 is this process's alone;
// an address whose Redis ports are still held all the same (a node of an
// earlier test that has not exited yet) is passed over.
var redisIP atomic.Int32

func nextRedisIP(t testing.TB) string {
	t.Helper()
	for range 51 {
		ip := testnet.IP(200 + int(redisIP.Add(1)-1)%51)
		if portsFree(ip, 6379, 6380, 16379) {
			return ip
		}
	}
	t.Fatalf("no address of %s200-250 has its Redis ports free", testnet.Prefix())
	return ""
}

// portsFree reports whether nothing listens on ip's ports.
func portsFree(ip string, ports ...int) bool {
	for _, port := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// redisPod is one Redis pod: its Pod object and the process behind it.
type redisPod struct {
	name           string
	shard, ordinal int
	dir            string
	srv            *redistest.Server
	// firstIP is the pod's IP when it first started: what a DNS cache that
	// never expires answers for its name (see hostnameDirective).
	firstIP string
}

// hostnameDirective is the hostname the pod's node announces, as the
// operator renders it ($(POD_NAME).<fleet>-redis.<ns>.svc), for a client
// whose cluster DNS kept the pod's first answer: its first IP. Clients that
// follow announced hostnames (cluster-preferred-endpoint-type hostname) dial
// that address after the pod moved; clients given IPs never look at it.
func (p *redisPod) hostnameDirective() string { return "cluster-announce-hostname " + p.firstIP }

// clusterDNS plays the cluster DNS for the tests' Redis pods once their
// records have followed them: "namespace/pod" resolves to the status.podIP
// setPodIP last wrote.
var clusterDNS sync.Map

// startSeed stands for the DNS name of a Redis pod, as the operator gives
// the limiters for seeds (RedisSeeds): a loopback address that forwards each
// connection to the pod's current IP (clusterDNS). It stops when the test
// ends.
func startSeed(t *testing.T, ns, pod string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ip, _ := clusterDNS.Load(ns + "/" + pod)
			s, err := net.DialTimeout("tcp", net.JoinHostPort(fmt.Sprint(ip), "6379"), time.Second)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return l.Addr().String()
}

func (p *redisPod) addr() string { return p.srv.Addr }

// redisFleet is a Cluster fleet and its stand-in pods.
type redisFleet struct {
	fleet *v1alpha1.LimiterFleet
	pods  []*redisPod
	extra []string // directives beyond the rendered redis.conf
}

// The test's own hands on the nodes, as `kubectl exec redis-cli` would
// be: a user that the tests add to every node beside the rendered ones.
// Neither the operator nor the limiters use it.
const testAdmin, testAdminPW = "sluice-test", "test-admin-pw"

// renderedDirectives are the operator's redis.conf as "name value"
// directives, less what a pod's volume provides: the test has no /data
// (each node gets a temp dir). Nodes announce their IP (StartNode) and, in
// startNode, a hostname (hostnameDirective). The Secret volumes are
// directories of the pod's copies (secretDirs: mount path -> directory);
// the test's admin user comes last. The port is StartNode's: with TLS, a
// plain-text one for the test's own hands only.
func renderedDirectives(fleet *v1alpha1.LimiterFleet, secretDirs map[string]string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(resources.RedisConfig(betaOf(fleet))), "\n") {
		name, _, _ := strings.Cut(line, " ")
		switch name {
		case "port", "bind", "dir", "cluster-config-file", "save":
			continue
		}
		for mount, dir := range secretDirs {
			line = strings.ReplaceAll(line, " "+mount+"/", " "+dir+"/")
		}
		out = append(out, line)
	}
	return append(out, "user "+testAdmin+" on >"+testAdminPW+" ~* &* +@all")
}

// newRedisFleet creates a Cluster fleet with the given shape and starts its
// pods. Limiter replicas are 0: tests that need limiters start them.
func newRedisFleet(t *testing.T, ns, name string, shards, replicas int32, mutate ...func(*v1alpha1.LimiterFleet)) *redisFleet {
	t.Helper()
	return newRedisFleetExtra(t, ns, name, shards, replicas, nil, mutate...)
}

// authSecret waits for the fleet's auth Secret, which the operator
// generates, and returns it.
func (rf *redisFleet) authSecret(t testing.TB) *corev1.Secret {
	t.Helper()
	return rf.secret(t, resources.RedisAuthSecretName(betaOf(rf.fleet)))
}

// secret waits for a Secret of the fleet's namespace and returns it.
func (rf *redisFleet) secret(t testing.TB, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	eventually(t, 30*time.Second, "Secret "+name, func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: rf.fleet.Namespace, Name: name}, s)
	})
	return s
}

// startNode starts p's process on ip as its pod's containers would start:
// the Secret volumes (the auth Secret's users file and, with TLS, the TLS
// Secret) copied into the pod's directory, then redis-server with the
// rendered redis.conf, p's hostname (hostnameDirective) and the fleet's
// extra directives. With TLS, the node serves TLS on ip:6379, the pod's
// port, and plain text on ip:6380 for the test's own hands (p.srv.Addr).
func (rf *redisFleet) startNode(t *testing.T, p *redisPod, ip string) {
	t.Helper()
	dirs := map[string]string{"/etc/redis-auth": filepath.Join(p.dir, "auth")}
	files := map[string]*corev1.Secret{"/etc/redis-auth": rf.secret(t, resources.RedisAuthSecretName(betaOf(rf.fleet)))}
	addr := ip + ":6379"
	if resources.RedisTLSEnabled(betaOf(rf.fleet)) {
		dirs["/etc/redis-tls"] = filepath.Join(p.dir, "tls")
		files["/etc/redis-tls"] = rf.secret(t, resources.RedisTLSSecretName(betaOf(rf.fleet)))
		addr = ip + ":6380"
	}
	for mount, s := range files {
		if err := os.MkdirAll(dirs[mount], 0o700); err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Data {
			if err := os.WriteFile(filepath.Join(dirs[mount], k), v, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.srv = redistest.StartNode(t, addr, p.dir, rf.fleet.Spec.EffectiveNodeTimeout(), append(append(renderedDirectives(rf.fleet, dirs), p.hostnameDirective()), rf.extra...)...)
	p.srv.Username, p.srv.Password = testAdmin, testAdminPW
	srv := p.srv
	t.Cleanup(func() {
		if t.Failed() {
			log := srv.Log()
			if len(log) > 3000 {
				log = log[len(log)-3000:]
			}
			t.Logf("the end of %s's log:\n%s", p.name, log)
			if nodes, err := srv.Do("CLUSTER", "NODES"); err == nil {
				t.Logf("CLUSTER NODES of %s:\n%v", p.name, nodes)
			}
		}
	})
}

// limiterEnv is the env (NAME=value) of the fleet's limiter container as
// the kubelet starts it: the Deployment's, with secretKeyRefs resolved.
// For a Cluster fleet it holds the limiters' ACL user and password.
func (rf *redisFleet) limiterEnv(t *testing.T) []string {
	t.Helper()
	_, env := rf.limiterPod(t)
	return env
}

// limiterPod is the args and env of the fleet's limiter container as the
// kubelet starts it (asKubelet).
func (rf *redisFleet) limiterPod(t *testing.T) (args, env []string) {
	t.Helper()
	dep := &appsv1.Deployment{}
	eventually(t, 30*time.Second, "the limiter Deployment", func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: rf.fleet.Namespace, Name: resources.LimiterName(betaOf(rf.fleet))}, dep)
	})
	return asKubelet(t, dep)
}

// addPod starts the process of pod <shard>-<ordinal> on a new address and
// creates its Pod object with that status.podIP.
func (rf *redisFleet) addPod(t *testing.T, shard, ordinal int) *redisPod {
	t.Helper()
	p := &redisPod{name: fmt.Sprintf("%s-%d", resources.RedisShardName(betaOf(rf.fleet), shard), ordinal), shard: shard, ordinal: ordinal, dir: t.TempDir()}
	rf.pods = append(rf.pods, p)
	ip := nextRedisIP(t)
	p.firstIP = ip
	rf.startNode(t, p, ip)
	labels := resources.RedisLabels(betaOf(rf.fleet))
	labels[resources.LabelRedisShard] = strconv.Itoa(shard)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: rf.fleet.Namespace, Name: p.name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "redis", Image: "redis:7.2"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	setPodIP(t, rf.fleet.Namespace, p.name, ip)
	return p
}

// setPodIP writes status.podIP as a kubelet does when a pod (re)starts.
func setPodIP(t *testing.T, ns, name, ip string) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := k8s.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("pod %s status.podIP %s: %v", name, ip, err)
	}
	clusterDNS.Store(ns+"/"+name, ip)
}

// get reads the fleet.
func (rf *redisFleet) get(t testing.TB) *v1alpha1.LimiterFleet {
	t.Helper()
	f := &v1alpha1.LimiterFleet{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rf.fleet), f); err != nil {
		t.Fatal(err)
	}
	return f
}

// waitRedisReady waits for RedisReady with the given status and reason at
// the fleet's current generation, and returns the fleet.
func (rf *redisFleet) waitRedisReady(t testing.TB, within time.Duration, status metav1.ConditionStatus, reason string) *v1alpha1.LimiterFleet {
	t.Helper()
	var got *v1alpha1.LimiterFleet
	eventually(t, within, fmt.Sprintf("RedisReady=%s %s", status, reason), func() error {
		f := rf.get(t)
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		switch {
		case c == nil:
			return fmt.Errorf("no RedisReady yet")
		case c.ObservedGeneration != f.Generation || c.Status != status || (reason != "" && c.Reason != reason):
			return fmt.Errorf("RedisReady=%s (%s) at generation %d/%d: %s", c.Status, c.Reason, c.ObservedGeneration, f.Generation, c.Message)
		}
		got = f
		return nil
	})
	return got
}

// clusterClient is a go-redis cluster client over the pods' addresses.
func (rf *redisFleet) clusterClient(t testing.TB) *goredis.ClusterClient {
	var addrs []string
	for _, p := range rf.pods {
		addrs = append(addrs, p.addr())
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, Username: testAdmin, Password: testAdminPW,
		MaxRedirects: 16, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// mutatingCalls sums, over every pod, the calls of the commands that change
// a cluster, from INFO commandstats.
func (rf *redisFleet) mutatingCalls(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range rf.pods {
		info, err := p.srv.Client(t).Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok {
				continue
			}
			cmd := strings.TrimPrefix(name, "cmdstat_")
			switch cmd {
			case "cluster|meet", "cluster|addslots", "cluster|addslotsrange", "cluster|replicate", "cluster|setslot",
				"cluster|failover", "cluster|forget", "cluster|reset", "cluster|delslots", "cluster|delslotsrange",
				"migrate", "flushall", "flushdb":
				n, _ := strconv.Atoi(strings.Split(rest, ",")[0])
				out[cmd] += n
			}
		}
	}
	return out
}

// TestRedisClusterBootstrap: the operator renders the objects, forms 3
// shards x 1 replica from pod IPs read from the API, reports it in
// status.redis and RedisReady, and a later reconcile sends no mutating
// command.
func TestRedisClusterBootstrap(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	start := time.Now()
	rf := newRedisFleet(t, "redis-boot", "boot", 3, 1)
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	t.Logf("bootstrap of 3 shards x 1 replica through the operator: RedisReady=True %v after the fleet was created (pods started before)", time.Since(start).Round(time.Millisecond))

	st := f.Status.Redis
	if st == nil || st.ClusterState != "ok" || st.SlotsAssigned != 16384 || len(st.Primaries) != 3 || len(st.Replicas) != 3 || st.Operation != "" || st.Migration != nil {
		t.Fatalf("status.redis %+v", st)
	}
	for _, n := range append(slices.Clone(st.Primaries), st.Replicas...) {
		if len(n.NodeID) != 40 || n.Link != "connected" || !strings.HasPrefix(n.Address, testnet.Prefix()) {
			t.Errorf("node %+v", n)
		}
	}
	for _, p := range st.Primaries {
		if !strings.HasSuffix(p.Pod, "-0") || p.Slots < 5461 || p.Slots > 5462 {
			t.Errorf("primary %+v: want ordinal 0 with a third of the slots", p)
		}
	}
	if len(st.LastActions) == 0 || len(st.LastActions) > 10 {
		t.Errorf("lastActions %d entries", len(st.LastActions))
	}
	var events corev1.EventList
	if err := k8s.List(ctx, &events, client.InNamespace(f.Namespace)); err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, e := range events.Items {
		if e.InvolvedObject.Name == f.Name && e.Reason == "RedisClusterCommands" {
			recorded++
		}
	}
	if recorded == 0 {
		t.Errorf("no RedisClusterCommands Event for the bootstrap")
	}

	// The objects, each owned by the fleet.
	objs := []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: resources.RedisConfigMapName(betaOf(f))}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: resources.RedisName(betaOf(f))}}}
	for s := range 3 {
		objs = append(objs, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: resources.RedisShardName(betaOf(f), s)}},
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: resources.RedisShardName(betaOf(f), s)}})
	}
	for _, o := range objs {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: o.GetName()}, o); err != nil {
			t.Errorf("%T %s: %v", o, o.GetName(), err)
		} else if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != f.Name {
			t.Errorf("%T %s owners %+v", o, o.GetName(), refs)
		}
	}
	dep := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: resources.LimiterName(betaOf(f))}, dep); err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--store=redis-cluster://boot-redis-0-0.boot-redis.redis-boot.svc:6379,") {
		t.Errorf("limiter args %q", args)
	}

	// A reconcile of the converged cluster sends nothing that mutates it.
	before := rf.mutatingCalls(t)
	// A new generation: one full pass. A merge patch, as kubectl does: the
	// operator writes the fleet's status meanwhile.
	orig := f.DeepCopy()
	f.Spec.Replicas = ptr.To[int32](1)
	if err := k8s.Patch(ctx, f, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a pass at the new generation", func() error {
		if g := rf.get(t); g.Status.ObservedGeneration != g.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", g.Status.ObservedGeneration, g.Generation)
		}
		return nil
	})
	rf.waitRedisReady(t, 10*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	if after := rf.mutatingCalls(t); !maps.Equal(before, after) {
		t.Errorf("mutating commands before %v, after another reconcile %v", before, after)
	}
	t.Logf("mutating commands over the whole bootstrap: %v", before)
}

// TestRedisClusterBadNodes: a node that answers garbage, a node that refuses
// the password, and a missing password Secret each give RedisReady=False
// with the reason and the pod, and the rest of the fleet keeps being
// reconciled.
func TestRedisClusterBadNodes(t *testing.T) {
	needSuite(t)
	ctx := context.Background()

	t.Run("garbage", func(t *testing.T) {
		rf := newRedisFleet(t, "redis-garbage", "garbage", 3, 0)
		// Pod 2-0 is replaced by something that is not Redis.
		bad := rf.pods[2]
		bad.srv.Stop()
		garbage := startGarbageServer(t, nextRedisIP(t)+":6379")
		setPodIP(t, rf.fleet.Namespace, bad.name, strings.TrimSuffix(garbage, ":6379"))
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1beta1.InvalidReplyReason)
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		if !strings.Contains(c.Message, bad.name) {
			t.Errorf("message does not name %s: %s", bad.name, c.Message)
		}
		t.Logf("RedisReady=False %s: %s", c.Reason, c.Message)
		requireReconciling(t, rf)
	})

	t.Run("wrong password", func(t *testing.T) {
		// The nodes run a users file with other passwords than the auth
		// Secret's, as pods not restarted since the Secret changed do.
		rf := newRedisFleet(t, "redis-auth", "auth", 3, 0)
		stale := []byte(resources.RedisUsersConf(resources.RedisPasswords{
			Limiter: "stale-limiter-password", Operator: "stale-operator-password", Replication: "stale-replication-password"}))
		for _, p := range rf.pods {
			if err := os.WriteFile(filepath.Join(p.dir, "auth", resources.RedisUsersKey), stale, 0o600); err != nil {
				t.Fatal(err)
			}
			p.srv.Restart(t)
		}
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1beta1.AuthFailedReason)
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		if !strings.Contains(c.Message, "WRONGPASS") {
			t.Errorf("message does not say the node refused the password: %s", c.Message)
		}
		t.Logf("RedisReady=False %s: %s", v1beta1.AuthFailedReason, c.Message)
		requireReconciling(t, rf)

		// The pods restart with the Secret's users file: the operator
		// forms the cluster.
		for _, p := range rf.pods {
			if err := os.WriteFile(filepath.Join(p.dir, "auth", resources.RedisUsersKey), rf.authSecret(t).Data[resources.RedisUsersKey], 0o600); err != nil {
				t.Fatal(err)
			}
			p.srv.Restart(t)
		}
		rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	})

	t.Run("auth Secret in the way", func(t *testing.T) {
		// A Secret with the auth Secret's name that the fleet does not
		// control: the operator neither takes it over nor overwrites it.
		ns := namespace(t, "redis-inway")
		foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inway-redis-auth"}, Data: map[string][]byte{"mine": []byte("keep")}}
		if err := k8s.Create(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		rf := createRedisFleet(t, ns, "inway", 3, 0, nil)
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1beta1.SecretNotOwnedReason)
		if c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition); !strings.Contains(c.Message, "Secret redis-inway/inway-redis-auth exists and is not controlled by LimiterFleet inway") {
			t.Errorf("message %q", c.Message)
		}
		got := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Data) != 1 || string(got.Data["mine"]) != "keep" || len(got.OwnerReferences) != 0 {
			t.Errorf("the foreign Secret was changed: %v, owners %v", got.Data, got.OwnerReferences)
		}
		requireReconciling(t, rf)
	})

	t.Run("shards lowered behind the CRD's back", func(t *testing.T) {
		rf := newRedisFleet(t, "redis-scalein", "scalein", 3, 0)
		rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
		// The CRD refuses lowering shards; a fourth shard's StatefulSet that
		// the fleet made before its shards were lowered (under an old CRD)
		// is the same to the operator. (One the fleet does not control is
		// in the way: the operator never takes it.)
		extra := resources.BuildRedisStatefulSet(betaOf(rf.fleet), 3, "", resources.RedisSecretHashes{})
		extra.TypeMeta = metav1.TypeMeta{}
		if err := controllerutil.SetControllerReference(rf.get(t), extra, scheme); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, extra); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, extra) })
		updateFleet(t, client.ObjectKeyFromObject(rf.fleet), func(f *v1alpha1.LimiterFleet) {
			f.Spec.Enforcement = ptr.To(v1alpha1.EnforcementDisabled) // a new pass
		})
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1beta1.ScaleInRejectedReason)
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		if !strings.Contains(c.Message, "scale-in is not supported") {
			t.Errorf("message %q", c.Message)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(extra), extra); err != nil {
			t.Errorf("the fourth shard's StatefulSet: %v", err)
		}
		t.Logf("RedisReady=False %s: %s", c.Reason, c.Message)
	})

	t.Run("missing Secret", func(t *testing.T) {
		rf := createRedisFleet(t, "redis-nosecret", "nosecret", 3, 0, nil, func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "absent"}
		})
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1beta1.AuthFailedReason)
		if c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition); !strings.Contains(c.Message, "Secret redis-nosecret/absent not found") {
			t.Errorf("message %q", c.Message)
		}
	})
}

// newRedisFleetExtra is newRedisFleet with extra directives for every node.
func newRedisFleetExtra(t *testing.T, ns, name string, shards, replicas int32, extra []string, mutate ...func(*v1alpha1.LimiterFleet)) *redisFleet {
	t.Helper()
	rf := createRedisFleet(t, ns, name, shards, replicas, extra, mutate...)
	for s := range int(shards) {
		for o := range int(replicas) + 1 {
			rf.addPod(t, s, o)
		}
	}
	return rf
}

// createRedisFleet creates the fleet, without pods: they start from the
// auth Secret the operator generates for it (addPod).
func createRedisFleet(t *testing.T, ns, name string, shards, replicas int32, extra []string, mutate ...func(*v1alpha1.LimiterFleet)) *redisFleet {
	t.Helper()
	needSuite(t)
	namespace(t, ns)
	f := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To[int32](0),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": name}},
			Redis: v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster), Shards: ptr.To(shards), ReplicasPerShard: ptr.To(replicas),
				NodeTimeout: &metav1.Duration{Duration: 2 * time.Second}},
		},
	}
	for _, m := range mutate {
		m(f)
	}
	if err := k8s.Create(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteFleet(t, f)
		_ = k8s.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels(resources.RedisSelectorLabels(betaOf(f))))
	})
	return &redisFleet{fleet: f, extra: extra}
}

// requireReconciling shows that a failing Redis pass stalls nothing: a spec
// change is still observed and the snapshot still written.
func requireReconciling(t *testing.T, rf *redisFleet) {
	t.Helper()
	f := rf.get(t)
	orig := f.DeepCopy()
	f.Spec.Enforcement = ptr.To(v1alpha1.EnforcementDisabled)
	// A merge patch: the operator writes status meanwhile, and an Update
	// would conflict on the resourceVersion.
	if err := k8s.Patch(context.Background(), f, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the fleet still reconciles", func() error {
		g := rf.get(t)
		if g.Status.ObservedGeneration != g.Generation || g.Status.Snapshot == nil {
			return fmt.Errorf("observedGeneration %d, generation %d, snapshot %v", g.Status.ObservedGeneration, g.Generation, g.Status.Snapshot)
		}
		return nil
	})
}

// startGarbageServer listens on addr and answers every connection with a
// line that is not RESP, as a misrouted HTTP server would.
func startGarbageServer(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					if _, err := c.Read(buf); err != nil {
						return
					}
					if _, err := c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// limiterLoad is steady traffic on real limiter processes whose store is
// the fleet's Redis Cluster.
type limiterLoad struct {
	procs         []*limiterProc
	stop          chan struct{}
	wg            sync.WaitGroup
	codes         sync.Map // status code -> *atomic.Int64
	transportErrs atomic.Int64
}

// startLimiters starts n limiter processes with --store redis-cluster:// on
// the seeds the operator renders, pod 0 of shards 0-2 by DNS name
// (startSeed stands for those names), a policy they enforce, and traffic
// over 500 counters spread across the slots.
func (rf *redisFleet) startLimiters(t *testing.T, n int) *limiterLoad {
	t.Helper()
	var seeds []string
	for shard := range int(v1alpha1.MinShards) {
		seeds = append(seeds, startSeed(t, rf.fleet.Namespace, fmt.Sprintf("%s-0", resources.RedisShardName(betaOf(rf.fleet), shard))))
	}
	// The limiters authenticate, and verify TLS, as the kubelet would start
	// them: the Deployment's scheme, --redis-* flags and env.
	args, env := rf.limiterPod(t)
	scheme, _, _ := strings.Cut(argValue(args, "--store"), "://")
	var redisArgs []string
	for _, a := range args {
		if strings.HasPrefix(a, "--redis-") {
			redisArgs = append(redisArgs, a)
		}
	}
	procs := fleetPodsWithEnv(t, rf.fleet, n, scheme+"://"+strings.Join(seeds, ","), env, redisArgs...)
	pol := benchPolicy(rf.fleet.Namespace, "load", rf.fleet.Name, 1)
	pol.Spec.Rate.Limit = 1_000_000
	pol.Spec.FailureMode = ptr.To(v1alpha1.FailClosed)
	if err := k8s.Create(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pol) })
	waitPolicy(t, pol.Namespace, pol.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	l := &limiterLoad{procs: procs, stop: make(chan struct{})}
	for w := range 4 {
		l.wg.Add(1)
		go l.run(w)
	}
	t.Cleanup(l.halt)
	return l
}

func (l *limiterLoad) run(worker int) {
	defer l.wg.Done()
	client := &http.Client{Timeout: 5 * time.Second}
	for i := worker; ; i += 4 {
		select {
		case <-l.stop:
			return
		default:
		}
		p := l.procs[i%len(l.procs)]
		body := fmt.Sprintf(`{"domain":"bench-1","descriptors":[{"entries":[{"key":"tenant","value":"t%d"},{"key":"route","value":"/v1/items/1"}]}]}`, i%500)
		resp, err := client.Post("http://"+p.httpAddr+"/v1/ratelimit/check", "application/json", strings.NewReader(body))
		if err != nil {
			l.transportErrs.Add(1)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		v, _ := l.codes.LoadOrStore(resp.StatusCode, &atomic.Int64{})
		v.(*atomic.Int64).Add(1)
	}
}

// waitAnswers waits until the load has n answers in all.
func (l *limiterLoad) waitAnswers(t *testing.T, n int64) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d decisions answered", n), func() error {
		if got := l.answers(); got < n {
			return fmt.Errorf("%d answers so far", got)
		}
		return nil
	})
}

// answers is the number of answered requests so far.
func (l *limiterLoad) answers() int64 {
	var n int64
	l.codes.Range(func(_, v any) bool {
		n += v.(*atomic.Int64).Load()
		return true
	})
	return n
}

func (l *limiterLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// summary reports the answers so far and the limiters' store errors.
func (l *limiterLoad) summary(t testing.TB) (string, float64) {
	var parts []string
	l.codes.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%d: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(parts)
	errs := 0.0
	classes := map[string]float64{}
	for _, p := range l.procs {
		errs += p.metric(t, "sluice_store_errors_total")
		for _, c := range []string{"timeout", "connection", "clusterdown", "tryagain", "masterdown", "loading", "redirect"} {
			classes[c] += p.metric(t, "sluice_redis_errors_total", "class", c)
		}
		classes["breaker openings"] += p.metric(t, "sluice_redis_breaker_opened_total")
	}
	return fmt.Sprintf("answers {%s}, transport errors %d, store errors %.0f (each answered by the policy's failureMode: Closed, a 429), Redis errors by class %v",
		strings.Join(parts, ", "), l.transportErrs.Load(), errs, classes), errs
}

// errorsOfClass sums the limiters' sluice_redis_errors_total of class.
func (l *limiterLoad) errorsOfClass(t testing.TB, class string) float64 {
	n := 0.0
	for _, p := range l.procs {
		n += p.metric(t, "sluice_redis_errors_total", "class", class)
	}
	return n
}

// pod returns the stand-in of the named pod.
func (rf *redisFleet) pod(t testing.TB, name string) *redisPod {
	t.Helper()
	for _, p := range rf.pods {
		if p.name == name {
			return p
		}
	}
	t.Fatalf("no pod %s", name)
	return nil
}

// liveClusterOK reports whether every running node says cluster_state ok
// with every slot assigned.
func (rf *redisFleet) liveClusterOK(t testing.TB) error {
	for _, p := range rf.pods {
		if !p.srv.Running() {
			continue
		}
		info, err := p.srv.Client(t).ClusterInfo(context.Background()).Result()
		if err != nil {
			return fmt.Errorf("%s: %v", p.name, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			return fmt.Errorf("%s: not ok yet", p.name)
		}
	}
	return nil
}

// keysInOtherShards returns n keys whose slots shard does not serve.
func keysInOtherShards(t *testing.T, c *goredis.ClusterClient, first, last int32, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("other-%d", i)
		slot, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int32(slot) < first || int32(slot) > last {
			out = append(out, k)
		}
	}
	return out
}

func writeKeys(t *testing.T, c *goredis.ClusterClient, prefix string, n int) {
	t.Helper()
	for i := range n {
		if err := c.Set(context.Background(), fmt.Sprintf("%s-%d", prefix, i), i, 0).Err(); err != nil {
			t.Fatalf("SET %s-%d: %v", prefix, i, err)
		}
	}
}

func checkKeys(t *testing.T, c *goredis.ClusterClient, prefix string, n int) {
	t.Helper()
	missing := 0
	for i := range n {
		v, err := c.Get(context.Background(), fmt.Sprintf("%s-%d", prefix, i)).Int()
		if err != nil || v != i {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d keys %s-* lost", missing, n, prefix)
	}
}

// shutdown stops a node as a pod's SIGTERM does: SHUTDOWN writes the
// append-only file, then the process exits.
func (p *redisPod) shutdown(t *testing.T) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: p.addr(), Username: testAdmin, Password: testAdminPW, MaxRetries: -1})
	_ = c.Shutdown(context.Background()).Err() // the connection closes as it exits
	_ = c.Close()
	p.srv.Stop()
}

// TestRedisClusterHeals: under limiter load, kill -9 a primary: its replica
// takes over and the other shards keep serving; the killed pod restarts
// and rejoins. Then every pod restarts on a new IP: the operator re-forms
// the cluster by node ID with every key kept.
func TestRedisClusterHeals(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	rf := newRedisFleet(t, "redis-heal", "heal", 3, 1)
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	load := rf.startLimiters(t, 2)
	cc := rf.clusterClient(t)

	// kill -9 the primary of the first shard.
	victim := f.Status.Redis.Primaries[0]
	others := keysInOtherShards(t, cc, 0, victim.Slots-1, 200)
	if victim.Shard != 0 {
		t.Fatalf("first primary %+v is not shard 0", victim)
	}
	var otherErrs atomic.Int64
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		deadline := time.Now().Add(8 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			if err := cc.Incr(ctx, others[i%len(others)]).Err(); err != nil {
				otherErrs.Add(1)
			}
		}
	}()
	killed := time.Now()
	rf.pod(t, victim.Pod).srv.Stop()
	nodeTimeout := f.Spec.EffectiveNodeTimeout()
	var heir string
	for _, r := range f.Status.Redis.Replicas {
		if r.Shard == victim.Shard {
			heir = r.Pod
		}
	}
	eventually(t, 30*time.Second, "the replica took over and every live node says ok", func() error {
		role, err := rf.pod(t, heir).srv.Client(t).Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("%s ROLE %v %v", heir, role, err)
		}
		return rf.liveClusterOK(t)
	})
	okAfter := time.Since(killed)
	<-writes
	// How long it took is told, not judged: on a loaded machine Redis's
	// election can come after the operator's FORCE, and either heals it.
	t.Logf("kill -9 of primary %s: cluster_state ok on every live node after %v (node-timeout %v); writes to the other shards' slots failed %d times",
		victim.Pod, okAfter.Round(time.Millisecond), nodeTimeout, otherErrs.Load())
	if otherErrs.Load() != 0 {
		t.Errorf("the other shards failed %d writes while shard 0 failed over", otherErrs.Load())
	}
	// While the killed pod is gone, RedisReady tells the failover: the
	// lost primary, when it was last heard from, its heir since when.
	eventually(t, 30*time.Second, "RedisReady FailedOver, naming the lost primary and its heir", func() error {
		c := condition(rf.get(t).Status.Conditions, v1beta1.RedisReadyCondition)
		want := fmt.Sprintf("shard 0: primary %s lost (last heard from at ", victim.Pod)
		if c == nil || c.Reason != v1beta1.FailedOverReason || !strings.HasPrefix(c.Message, want) || !strings.Contains(c.Message, heir+" serves its slots (seen at ") {
			return fmt.Errorf("RedisReady %+v", c)
		}
		t.Logf("RedisReady while %s is gone: %s: %s", victim.Pod, c.Reason, c.Message)
		return nil
	})
	// The pod restarts (same IP, same volume) and rejoins as a replica.
	rf.pod(t, victim.Pod).srv.Restart(t)
	rejoin := time.Now()
	f = rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	eventually(t, 30*time.Second, "every node connected again", func() error {
		f = rf.get(t)
		st := f.Status.Redis
		if len(st.Primaries) != 3 || len(st.Replicas) != 3 {
			return fmt.Errorf("%d primaries, %d replicas", len(st.Primaries), len(st.Replicas))
		}
		for _, n := range append(slices.Clone(st.Primaries), st.Replicas...) {
			if n.Link != "connected" {
				return fmt.Errorf("%s link %s", n.Pod, n.Link)
			}
		}
		return nil
	})
	t.Logf("the killed pod restarted and rejoined: every node connected after %v", time.Since(rejoin).Round(time.Millisecond))
	summary, _ := load.summary(t)
	t.Logf("limiters through the failover: %s", summary)

	// Every pod restarts on a new IP, keeping its volume.
	writeKeys(t, cc, "kept", 1000)
	load.halt()
	for _, p := range rf.pods {
		p.shutdown(t)
	}
	restarted := time.Now()
	for _, p := range rf.pods {
		ip := nextRedisIP(t)
		rf.startNode(t, p, ip)
		setPodIP(t, rf.fleet.Namespace, p.name, ip)
	}
	eventually(t, 90*time.Second, "the cluster re-formed on the new addresses", func() error {
		f = rf.get(t)
		if c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition); c == nil || c.Reason != v1beta1.ClusterOKReason {
			return fmt.Errorf("RedisReady %+v", c)
		}
		if n := len(f.Status.Redis.Primaries) + len(f.Status.Redis.Replicas); n != len(rf.pods) {
			return fmt.Errorf("%d nodes in status", n)
		}
		for _, n := range append(slices.Clone(f.Status.Redis.Primaries), f.Status.Redis.Replicas...) {
			if n.Address != rf.pod(t, n.Pod).addr() || n.Link != "connected" {
				return fmt.Errorf("%s at %s (%s), pod at %s", n.Pod, n.Address, n.Link, rf.pod(t, n.Pod).addr())
			}
		}
		return rf.liveClusterOK(t)
	})
	t.Logf("every pod on a new IP: RedisReady=True, every node connected at its new address after %v", time.Since(restarted).Round(time.Millisecond))
	checkKeys(t, rf.clusterClient(t), "kept", 1000)
	if f.Status.Redis.DataLoss != "" {
		t.Errorf("dataLoss %q after a restart that lost nothing", f.Status.Redis.DataLoss)
	}
}

// TestRedisClusterScaleOut: 3 -> 4 shards under limiter load, with the
// operator stopped while the migration is under way and started again. No
// key is lost, the slots end even, no slot is left open, no Redis node
// answered CROSSSLOT, TRYAGAIN or CLUSTERDOWN (the limiters follow MOVED
// and ASK; their store errors, timeouts of the 20ms store deadline, are
// reported), and no node refused the operator's, the replicas' or the
// limiters' ACL user anything.
func TestRedisClusterScaleOut(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	rf := newRedisFleet(t, "redis-scale", "scale", 3, 1)
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	writeKeys(t, rf.clusterClient(t), "kept", 5000)
	load := rf.startLimiters(t, 2)
	_, errsBefore := load.summary(t)

	rf.addPod(t, 3, 0)
	rf.addPod(t, 3, 1)
	f := rf.get(t)
	orig := f.DeepCopy()
	f.Spec.Redis.Shards = ptr.To[int32](4)
	started := time.Now()
	if err := k8s.Patch(ctx, f, client.MergeFrom(orig)); err != nil { // not Update: the status moves on meanwhile
		t.Fatal(err)
	}
	// Stop the operator once it has saved some progress, then start it
	// again: it resumes from status.redis.migration.
	var saved *v1alpha1.RedisMigration
	eventually(t, 60*time.Second, "migration progress in status", func() error {
		if saved = rf.get(t).Status.Redis.Migration; saved == nil {
			return fmt.Errorf("no migration in status yet")
		}
		return nil
	})
	stopOperator()
	t.Logf("operator stopped mid-migration with %d moves left: %+v", len(saved.Moves), saved.Moves[0])
	if err := startOperator(); err != nil {
		t.Fatalf("restarting the operator: %v", err) // the suite cannot go on without it
	}
	f = rf.waitRedisReady(t, 120*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	t.Logf("3 -> 4 shards: RedisReady=True %v after the spec change", time.Since(started).Round(time.Millisecond))
	load.halt()

	st := f.Status.Redis
	if st.Migration != nil || len(st.Primaries) != 4 || st.SlotsAssigned != 16384 {
		t.Fatalf("status.redis %+v", st)
	}
	for _, p := range st.Primaries {
		if p.Slots != 4096 {
			t.Errorf("%s serves %d slots, want 4096", p.Pod, p.Slots)
		}
	}
	for _, p := range rf.pods {
		nodes, err := p.srv.Client(t).ClusterNodes(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(nodes, "->-") || strings.Contains(nodes, "-<-") {
			t.Errorf("%s has a slot left open:\n%s", p.name, nodes)
		}
	}
	checkKeys(t, rf.clusterClient(t), "kept", 5000)
	summary, errsAfter := load.summary(t)
	replies := rf.errorReplies(t)
	t.Logf("limiters through the scale-out: %s (%.0f during it); error replies of the Redis nodes: %v", summary, errsAfter-errsBefore, replies)
	// A redirect still unfollowed when the 20ms deadline passes fails its
	// decision like a timeout does, and a busy machine makes a few. A store
	// that did not follow redirects would fail one decision per MOVED or
	// ASK; the store's own tests (TestMovedSlotIsFollowedWithinTheDeadline)
	// hold the exact behaviour.
	if n, moved := load.errorsOfClass(t, "redirect"), replies["MOVED"]+replies["ASK"]; n > 0.1*float64(moved) {
		t.Errorf("%.0f decisions got a MOVED or ASK the store did not follow, of %d MOVED and ASK replies: slot moves fail decisions", n, moved)
	} else if n > 0 {
		t.Logf("%.0f decisions ran out of their deadline while following a redirect (of %d MOVED and ASK replies)", n, moved)
	}
	for _, bad := range []string{"CROSSSLOT", "TRYAGAIN", "CLUSTERDOWN"} {
		if replies[bad] != 0 {
			t.Errorf("the Redis nodes answered %s %d times", bad, replies[bad])
		}
	}
	// The users' rules cover what the operator (MIGRATE between nodes as
	// its user), the replicas and the limiters send through a scale-out.
	for _, p := range rf.pods {
		if denied := aclLog(t, p); len(denied) > 0 {
			t.Errorf("%s refused: %s", p.name, strings.Join(denied, "; "))
		}
	}
}

// errorReplies sums, over every node, the error replies it sent by prefix
// (INFO errorstats): what the limiters were told, MOVED and ASK included.
func (rf *redisFleet) errorReplies(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range rf.pods {
		info, err := p.srv.Client(t).Info(context.Background(), "errorstats").Result()
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":count=")
			if !ok {
				continue
			}
			n, _ := strconv.Atoi(rest)
			out[strings.TrimPrefix(name, "errorstat_")] += n
		}
	}
	return out
}

// A fleet that leaves mode Cluster gets its Redis objects deleted; objects
// it does not control are left alone.
func TestRedisObjectsGoWithModeCluster(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns := namespace(t, "redis-leaves")
	f := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leaves"},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To[int32](0),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "leaves"}},
			Redis:          v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisCluster), Shards: ptr.To[int32](3), ReplicasPerShard: ptr.To[int32](0)},
		},
	}
	if err := k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, f) })
	// Someone else's PDB with the fleet's Redis labels: not the operator's.
	foreign := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-ours", Labels: resources.RedisSelectorLabels(betaOf(f))},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
	}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	inFleet := []client.ListOption{client.InNamespace(ns), client.MatchingLabels(resources.RedisSelectorLabels(betaOf(f)))}
	count := func() (sets, pdbs, named int) {
		var ss appsv1.StatefulSetList
		var ps policyv1.PodDisruptionBudgetList
		if err := k8s.List(ctx, &ss, inFleet...); err != nil {
			t.Fatal(err)
		}
		if err := k8s.List(ctx, &ps, inFleet...); err != nil {
			t.Fatal(err)
		}
		if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.RedisName(betaOf(f))}, &corev1.Service{}) == nil {
			named++
		}
		if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.RedisConfigMapName(betaOf(f))}, &corev1.ConfigMap{}) == nil {
			named++
		}
		if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.RedisAuthSecretName(betaOf(f))}, &corev1.Secret{}) == nil {
			named++
		}
		return len(ss.Items), len(ps.Items), named
	}
	eventually(t, 30*time.Second, "the Redis objects applied", func() error {
		if s, p, n := count(); s != 3 || p != 4 || n != 3 {
			return fmt.Errorf("%d StatefulSets, %d PDBs, %d of the Service, ConfigMap and auth Secret", s, p, n)
		}
		return nil
	})
	// kubectl's lf is v1beta1 (the preferred version): patch in v1alpha1's shape.
	kubectl(t, "-n", ns, "patch", "limiterfleets.v1alpha1.ratelimit.sluice.dev", "leaves", "--type=merge", "-p",
		`{"spec":{"redis":{"mode":"None","shards":null,"replicasPerShard":null}}}`)
	eventually(t, 30*time.Second, "the Redis objects deleted", func() error {
		if s, p, n := count(); s != 0 || p != 1 || n != 0 {
			return fmt.Errorf("%d StatefulSets, %d PDBs (want only the foreign one), %d of the Service, ConfigMap and auth Secret", s, p, n)
		}
		return nil
	})
}

// TestRedisClusterDataLoss: a shard without replicas whose pod is replaced
// by an empty node (an emptyDir, a new node ID, a new IP) loses its keys.
// The operator heals the cluster and leaves a lasting trace: RedisDataLoss
// stays True, naming the slots, through later passes, until the fleet is
// annotated with the loss's time; a Warning Event and the
// sluice_operator_redis_data_loss_total counter record it too.
func TestRedisClusterDataLoss(t *testing.T) {
	ctx := context.Background()
	rf := newRedisFleet(t, "redis-loss", "loss", 3, 0)
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	if c := condition(f.Status.Conditions, v1beta1.RedisDataLossCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.NoDataLossReason {
		t.Fatalf("RedisDataLoss of a new cluster: %+v", c)
	}
	writeKeys(t, rf.clusterClient(t), "counted", 300)
	key := rf.fleet.Namespace + "/" + rf.fleet.Name
	countBefore := controllers.RedisDataLossCount(key)

	// Pod 1-0 is deleted and comes back empty on a new IP.
	victim := rf.pod(t, resources.RedisShardName(betaOf(rf.fleet), 1)+"-0")
	victim.srv.Stop()
	victim.dir = t.TempDir()
	ip := nextRedisIP(t)
	rf.startNode(t, victim, ip)
	setPodIP(t, rf.fleet.Namespace, victim.name, ip)
	replaced := time.Now()
	eventually(t, 90*time.Second, "the loss found", func() error {
		if c := condition(rf.get(t).Status.Conditions, v1beta1.RedisDataLossCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("RedisDataLoss %+v", c)
		}
		return nil
	})
	f = rf.waitRedisReady(t, 90*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	t.Logf("pod %s replaced by an empty node: RedisDataLoss=True and RedisReady=True %v later", victim.name, time.Since(replaced).Round(time.Millisecond))
	lost := 0
	for i := range 300 {
		if err := rf.clusterClient(t).Get(ctx, fmt.Sprintf("counted-%d", i)).Err(); err != nil {
			lost++
		}
	}
	if lost == 0 {
		t.Fatalf("no key lost: the test did not lose the shard")
	}

	check := func(what string) *v1alpha1.LimiterFleet {
		t.Helper()
		g := rf.get(t)
		c := condition(g.Status.Conditions, v1beta1.RedisDataLossCondition)
		st := g.Status.Redis
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1beta1.DataLostReason || c.ObservedGeneration != g.Generation ||
			!strings.Contains(c.Message, "5461-10921") || st.DataLossTime == nil || !strings.Contains(st.DataLoss, "5461-10921") {
			t.Fatalf("%s: RedisDataLoss %+v, dataLoss %q at %v: want True naming slots 5461-10921", what, c, st.DataLoss, st.DataLossTime)
		}
		return g
	}
	f = check("after the heal")
	t.Logf("%d of 300 keys lost; RedisDataLoss=True %s: %s", lost, v1beta1.DataLostReason, condition(f.Status.Conditions, v1beta1.RedisDataLossCondition).Message)
	// Later passes find no loss and keep it: two spec changes, two full passes.
	for _, e := range []v1alpha1.EnforcementMode{v1alpha1.EnforcementDisabled, v1alpha1.EnforcementEnabled} {
		kubectl(t, "-n", f.Namespace, "patch", "lf", f.Name, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"enforcement":%q}}`, e))
		eventually(t, 30*time.Second, "a pass at the new generation", func() error {
			if g := rf.get(t); g.Status.ObservedGeneration != g.Generation {
				return fmt.Errorf("observedGeneration %d, generation %d", g.Status.ObservedGeneration, g.Generation)
			}
			return nil
		})
		f = check("after another pass")
	}
	if out := kubectl(t, "-n", f.Namespace, "get", "lf", f.Name, "-o", "wide"); !regexpMatch(`(?m)^NAME\s.*\sDATA LOSS\s`, out) || !regexpMatch(`(?m)^loss\s.*\sTrue\s`, out) {
		t.Errorf("kubectl get lf -o wide lacks Data Loss True:\n%s", out)
	}

	var events corev1.EventList
	if err := k8s.List(ctx, &events, client.InNamespace(f.Namespace)); err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, e := range events.Items {
		if e.InvolvedObject.Name == f.Name && e.Reason == "RedisDataLoss" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "5461-10921") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no Warning Event RedisDataLoss naming the slots")
	}
	if n := controllers.RedisDataLossCount(key); n <= countBefore {
		t.Errorf("sluice_operator_redis_data_loss_total{fleet=%q} %v, was %v", key, n, countBefore)
	}

	// A person acknowledges it, with the time the status gives.
	at := f.Status.Redis.DataLossTime.UTC().Format(time.RFC3339)
	kubectl(t, "-n", f.Namespace, "annotate", "lf", f.Name, v1beta1.AnnotationDataLossAcknowledged+"="+at, "--overwrite")
	eventually(t, 30*time.Second, "RedisDataLoss acknowledged", func() error {
		c := condition(rf.get(t).Status.Conditions, v1beta1.RedisDataLossCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.DataLossAcknowledgedReason || !strings.Contains(c.Message, "5461-10921") {
			return fmt.Errorf("RedisDataLoss %+v", c)
		}
		return nil
	})
}

// TestRedisPodReplacedLimitersFollow: under limiter load, a Redis pod is
// replaced and comes back (its volume kept: node ID and keys) on a new IP,
// while the cluster DNS keeps answering its old one, as CoreDNS's cache did
// for 26s on a real cluster. The limiters are told node IPs, not names, so
// they reach it as soon as the operator has re-MEET it; RedisReady is True
// only once every limiter pod has reached the healed cluster, and from then
// on no decision fails to reach a node and no breaker opens. (A decision may
// still miss the 20ms deadline on this busy machine, as before any fault:
// those are timeouts, reported.)
func TestRedisPodReplacedLimitersFollow(t *testing.T) {
	rf := newRedisFleet(t, "redis-moved", "moved", 3, 0)
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	writeKeys(t, rf.clusterClient(t), "kept", 300)
	load := rf.startLimiters(t, 2)
	load.waitAnswers(t, 200)
	// unreached counts the calls that could not reach a node, the breaker
	// openings, and the breakers open now, over the limiters.
	unreached := func() (conn, opened, open float64) {
		for _, p := range load.procs {
			opened += p.metric(t, "sluice_redis_breaker_opened_total")
			open += p.metric(t, "sluice_redis_breaker_state")
		}
		return load.errorsOfClass(t, "connection"), opened, open
	}

	victim := rf.pod(t, resources.RedisShardName(betaOf(rf.fleet), 1)+"-0")
	oldAddr := victim.addr()
	_, errsBefore := load.summary(t)
	victim.shutdown(t)
	replaced := time.Now()
	ip := nextRedisIP(t)
	rf.startNode(t, victim, ip)
	setPodIP(t, rf.fleet.Namespace, victim.name, ip)

	// RedisReady=True for the healed cluster: the pod at its new address.
	var healed time.Duration
	eventually(t, 60*time.Second, "RedisReady=True with the pod at its new address", func() error {
		f := rf.get(t)
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		moved := false
		for _, n := range f.Status.Redis.Primaries {
			moved = moved || (n.Pod == victim.name && n.Address == victim.addr() && n.Link == "connected")
		}
		if c == nil || c.Status != metav1.ConditionTrue || !moved {
			return fmt.Errorf("RedisReady %+v, primaries %+v", c, f.Status.Redis.Primaries)
		}
		healed = time.Since(replaced)
		return nil
	})
	_, errsAtReady := load.summary(t)
	connAtReady, openedAtReady, _ := unreached()
	answered := load.answers()
	// From here on, every decision is made against Redis.
	eventually(t, 30*time.Second, "1000 more decisions", func() error {
		if n := load.answers() - answered; n < 1000 {
			return fmt.Errorf("%d decisions since RedisReady=True", n)
		}
		return nil
	})
	summary, errsAfter := load.summary(t)
	connAfter, openedAfter, openAfter := unreached()
	t.Logf("pod %s replaced (%s -> %s, its old IP still in DNS): RedisReady=True %v later; decisions answered by failureMode meanwhile: %.0f; after RedisReady=True: %.0f; %s",
		victim.name, oldAddr, victim.addr(), healed.Round(time.Millisecond), errsAtReady-errsBefore, errsAfter-errsAtReady, summary)
	if connAfter != connAtReady || openedAfter != openedAtReady || openAfter != 0 {
		t.Errorf("after RedisReady=True, %.0f calls could not reach a node, %.0f breakers opened and the breaker states sum to %.0f (0: all closed): the limiters could not use Redis while the fleet said it was ready",
			connAfter-connAtReady, openedAfter-openedAtReady, openAfter)
	}
	checkKeys(t, rf.clusterClient(t), "kept", 300)
}

// TestRedisReadyNeedsTheLimiters: the operator reaches every node and finds
// the cluster ok, but the limiters can't use it (here its nodes give clients
// a hostname nobody answers at, host 98 of the process's testnet /24,
// outside the addresses the tests' nodes use): RedisReady is False, StoreUnreachable,
// naming a limiter pod and its error, and Ready with it.
func TestRedisReadyNeedsTheLimiters(t *testing.T) {
	rf := newRedisFleetExtra(t, "redis-unreachable", "unreachable", 3, 0,
		[]string{"cluster-preferred-endpoint-type hostname", "cluster-announce-hostname " + testnet.IP(98)})
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	fleetPodsWithEnv(t, rf.fleet, 2, "redis-cluster://"+startSeed(t, rf.fleet.Namespace, resources.RedisShardName(betaOf(rf.fleet), 0)+"-0"), rf.limiterEnv(t))
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionFalse, v1beta1.StoreUnreachableReason)
	// The condition turns False on the first pod's report; the message
	// names both once the second pod has answered too.
	var f *v1alpha1.LimiterFleet
	var c *metav1.Condition
	eventually(t, 60*time.Second, "RedisReady to name both pods and the address they can't reach", func() error {
		f = rf.get(t)
		c = condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		if c == nil || c.Reason != v1beta1.StoreUnreachableReason ||
			!strings.Contains(c.Message, "2/2 limiter pods can't use Redis") || !strings.Contains(c.Message, testnet.IP(98)) {
			return fmt.Errorf("RedisReady %+v", c)
		}
		return nil
	})
	if r := condition(f.Status.Conditions, v1beta1.ReadyCondition); r == nil || r.Status != metav1.ConditionFalse {
		t.Errorf("Ready %+v while the limiters can't use Redis", r)
	}
	t.Logf("RedisReady=False %s: %s", c.Reason, c.Message)
}

// TestRedisPasswordChangeRollsLimiters changes the password of redis.auth's
// Secret on a running cluster: the users file takes it, the Redis pods'
// template and the limiters' both change (the limiters read their password
// at start, so without a roll they would keep sending the old one to pods
// that no longer take it), and once the pods run the new file the new
// password is the only one Redis takes. A Secret the operator can't read
// for a while rolls nothing.
func TestRedisPasswordChangeRollsLimiters(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns := namespace(t, "redis-rotate")
	first, second := "first-limiter-password-0123456789abcdef", "second-limiter-password-0123456789abcde"
	userSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rotate-pw"},
		Data: map[string][]byte{v1alpha1.DefaultRedisAuthKey: []byte(first)}}
	if err := k8s.Create(ctx, userSecret); err != nil {
		t.Fatal(err)
	}
	rf := newRedisFleet(t, ns, "rotate", 3, 0, func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: userSecret.Name}
	})
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)

	templates := func() (limiter, redis string) {
		dep := &appsv1.Deployment{}
		set := &appsv1.StatefulSet{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.LimiterName(betaOf(rf.fleet))}, dep); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.RedisShardName(betaOf(rf.fleet), 0)}, set); err != nil {
			t.Fatal(err)
		}
		return dep.Spec.Template.Annotations[resources.RedisLimiterAuthAnnotation], set.Spec.Template.Annotations[resources.RedisAuthHashAnnotation]
	}
	limiterBefore, redisBefore := templates()
	if limiterBefore == "" {
		t.Fatal("the limiters' pod template has no password hash")
	}
	// The Deployment waited for the auth Secret: it was made with its hash,
	// not made without and rolled once the Redis controller wrote it.
	dep := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.LimiterName(betaOf(rf.fleet))}, dep); err != nil || dep.Generation != 1 {
		t.Errorf("the limiter Deployment at generation %d (%v), want 1: made once, with the password's hash", dep.Generation, err)
	}
	limiterLogin := func(pw string) error {
		c := goredis.NewClient(&goredis.Options{Addr: rf.pods[0].addr(), Username: resources.RedisLimiterUser, Password: pw,
			DisableIdentity: true, MaxRetries: -1})
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	if err := limiterLogin(first); err != nil {
		t.Fatalf("the limiters' user with the first password: %v", err)
	}

	userSecret.Data[v1alpha1.DefaultRedisAuthKey] = []byte(second)
	if err := k8s.Update(ctx, userSecret); err != nil {
		t.Fatal(err)
	}
	// Secrets are not watched: the operator sees it at its next pass.
	var limiterAfter, redisAfter string
	eventually(t, 90*time.Second, "both pod templates to change", func() error {
		if limiterAfter, redisAfter = templates(); limiterAfter == limiterBefore || redisAfter == redisBefore {
			return fmt.Errorf("limiter template %s (was %s), Redis %s (was %s)", limiterAfter, limiterBefore, redisAfter, redisBefore)
		}
		return nil
	})
	t.Logf("limiter template %s -> %s, Redis %s -> %s", limiterBefore, limiterAfter, redisBefore, redisAfter)

	// The Redis pods roll, as the kubelet would run the new template.
	for _, p := range rf.pods {
		if err := os.WriteFile(filepath.Join(p.dir, "auth", resources.RedisUsersKey), rf.authSecret(t).Data[resources.RedisUsersKey], 0o600); err != nil {
			t.Fatal(err)
		}
		p.shutdown(t)
		p.srv.Restart(t)
	}
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	if err := limiterLogin(second); err != nil {
		t.Errorf("the limiters' user with the new password: %v", err)
	}
	if err := limiterLogin(first); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("the old password after the roll: %v, want WRONGPASS", err)
	}

	// The user's Secret goes away: RedisReady says so, and the limiters,
	// which still hold the password they started with, are not rolled.
	if err := k8s.Delete(ctx, userSecret); err != nil {
		t.Fatal(err)
	}
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionFalse, v1beta1.AuthFailedReason)
	requireReconciling(t, rf)
	if got, _ := templates(); got != limiterAfter {
		t.Errorf("an unreadable Secret changed the limiters' template: %s, was %s", got, limiterAfter)
	}
}

// TestRedisPodDeletedHandsOver (issue 29): under limiter load, a primary's
// pod is deleted. A finalizer holds it terminating, as its preStop sleep
// does on a kubelet, while the node keeps serving. The operator sees the
// deletionTimestamp and has the shard's replica take the slots over
// (CLUSTER FAILOVER, coordinated: nothing acknowledged is lost); then the
// node stops as SIGTERM stops it and the pod comes back with its volume, as
// a replica. Over all of it, under 1% of the decisions fail, none for want
// of a node, and no breaker opens; the status names the pod being replaced
// and the failover among its last actions.
func TestRedisPodDeletedHandsOver(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	rf := newRedisFleet(t, "redis-handover", "handover", 3, 1)
	rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	writeKeys(t, rf.clusterClient(t), "kept", 300)
	load := rf.startLimiters(t, 2)
	load.waitAnswers(t, 200)
	victim := rf.pod(t, resources.RedisShardName(betaOf(rf.fleet), 1)+"-0")
	heir := resources.RedisShardName(betaOf(rf.fleet), 1) + "-1"
	_, errsBefore := load.summary(t)
	answeredBefore := load.answers()

	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: rf.fleet.Namespace, Name: victim.name}, pod); err != nil {
		t.Fatal(err)
	}
	const preStop = "test.sluice.dev/prestop-sleep"
	pod.Finalizers = append(pod.Finalizers, preStop)
	if err := k8s.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var handedOver time.Duration
	eventually(t, 60*time.Second, "shard 1's slots served by "+heir+", and the status waiting for "+victim.name, func() error {
		f := rf.get(t)
		st := f.Status.Redis
		served := false
		for _, n := range st.Primaries {
			served = served || (n.Pod == heir && n.Slots > 0)
		}
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		if !served || c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, victim.name+", terminating") {
			return fmt.Errorf("primaries %+v; RedisReady %+v", st.Primaries, c)
		}
		handedOver = time.Since(deleted)
		return nil
	})
	f := rf.get(t)
	if !slices.ContainsFunc(f.Status.Redis.LastActions, func(a v1alpha1.RedisAction) bool { return a.Action == heir+": CLUSTER FAILOVER" }) {
		t.Errorf("lastActions %+v: want %s: CLUSTER FAILOVER", f.Status.Redis.LastActions, heir)
	}

	// The preStop sleep ends, RedisHandOverSeconds after the deletion as on
	// a kubelet (not as soon as the hand-over shows: a limiter's slot map
	// may still name the old primary for a reload or two): SIGTERM, and the
	// pod is gone; the StatefulSet makes it again with its volume, on a new IP.
	time.Sleep(time.Until(deleted.Add(resources.RedisHandOverSeconds * time.Second))) // the preStop sleep's length
	victim.shutdown(t)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: rf.fleet.Namespace, Name: victim.name}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = slices.DeleteFunc(pod.Finalizers, func(s string) bool { return s == preStop })
	if err := k8s.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the deleted pod gone", func() error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: rf.fleet.Namespace, Name: victim.name}, &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	ip := nextRedisIP(t)
	rf.startNode(t, victim, ip)
	again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: rf.fleet.Namespace, Name: victim.name, Labels: pod.Labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "redis", Image: "redis:7.2"}}}}
	if err := k8s.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	setPodIP(t, rf.fleet.Namespace, victim.name, ip)
	eventually(t, 60*time.Second, "RedisReady=True with "+victim.name+" a replica", func() error {
		f := rf.get(t)
		c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
		replica := slices.ContainsFunc(f.Status.Redis.Replicas, func(n v1alpha1.RedisNodeStatus) bool { return n.Pod == victim.name })
		if c == nil || c.Status != metav1.ConditionTrue || !replica {
			return fmt.Errorf("RedisReady %+v, replicas %+v", c, f.Status.Redis.Replicas)
		}
		return nil
	})
	// The measure: the decisions of the minute around the fault,
	// here from the load's start to 30s after the deletion.
	eventually(t, time.Minute, "30s of load after the deletion", func() error {
		if d := time.Since(deleted); d < 30*time.Second {
			return fmt.Errorf("%v since the deletion", d.Round(time.Second))
		}
		return nil
	})
	summary, failed := load.summary(t)
	answered := load.answers()
	conn := load.errorsOfClass(t, "connection")
	t.Logf("pod %s deleted: %s served shard 1 %v later; %.0f of %d decisions failed (failureMode) from the load's start to 30s after the deletion (%.0f of %d before it); %s",
		victim.name, heir, handedOver.Round(time.Millisecond), failed, answered, errsBefore, answeredBefore, summary)
	if failed > 0.01*float64(answered) || conn > 0 {
		t.Errorf("%.0f of %d decisions failed (want under 1%%), %.0f of them for want of a node (want none)", failed, answered, conn)
	}
	checkKeys(t, rf.clusterClient(t), "kept", 300)
}
