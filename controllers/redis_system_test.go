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
	"maps"
	"net"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/limiter/store/redis/redistest"
)

// Redis pods in these tests are real cluster-enabled redis-server processes
// on 127.0.0.200-250:6379 (the engine's own tests use .100-.199), started
// with the redis.conf the operator renders. The test creates their Pod
// objects with those addresses as status.podIP, as the kubelet would, and
// the operator forms and heals the cluster against them.

// redisIP hands out 127.0.0.200 onwards.
var redisIP atomic.Int32

func nextRedisIP(t testing.TB) string {
	t.Helper()
	n := 200 + redisIP.Add(1) - 1
	if n > 250 {
		t.Fatal("out of 127.0.0.200-250 addresses for Redis pods")
	}
	return fmt.Sprintf("127.0.0.%d", n)
}

// redisPod is one Redis pod: its Pod object and the process behind it.
type redisPod struct {
	name           string
	shard, ordinal int
	dir            string
	srv            *redistest.Server
}

func (p *redisPod) addr() string { return p.srv.Addr }

// redisFleet is a Cluster fleet and its stand-in pods.
type redisFleet struct {
	fleet *v1alpha1.LimiterFleet
	pods  []*redisPod
	extra []string // directives beyond the rendered redis.conf
}

// renderedDirectives are the operator's redis.conf as "name value"
// directives, less what a pod's volume and DNS provide: the test has no
// /data (each node gets a temp dir) and no DNS for the headless Service,
// so nodes announce their IPs.
func renderedDirectives(fleet *v1alpha1.LimiterFleet) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(controllers.RedisConfig(fleet)), "\n") {
		name, _, _ := strings.Cut(line, " ")
		switch name {
		case "port", "bind", "dir", "cluster-config-file", "save", "cluster-preferred-endpoint-type":
			continue
		}
		out = append(out, line)
	}
	return append(out, "cluster-preferred-endpoint-type ip")
}

// newRedisFleet creates a Cluster fleet with the given shape and starts its
// pods. Limiter replicas are 0: tests that need limiters start them.
func newRedisFleet(t *testing.T, ns, name string, shards, replicas int32, mutate ...func(*v1alpha1.LimiterFleet)) *redisFleet {
	t.Helper()
	return newRedisFleetExtra(t, ns, name, shards, replicas, nil, mutate...)
}

// addPod starts the process of pod <shard>-<ordinal> on a new address and
// creates its Pod object with that status.podIP.
func (rf *redisFleet) addPod(t *testing.T, shard, ordinal int) *redisPod {
	t.Helper()
	p := &redisPod{name: fmt.Sprintf("%s-%d", controllers.RedisShardName(rf.fleet, shard), ordinal), shard: shard, ordinal: ordinal, dir: t.TempDir()}
	rf.pods = append(rf.pods, p)
	ip := nextRedisIP(t)
	p.srv = redistest.StartNode(t, ip+":6379", p.dir, rf.fleet.Spec.EffectiveNodeTimeout(), append(renderedDirectives(rf.fleet), rf.extra...)...)
	labels := controllers.RedisLabels(rf.fleet)
	labels[controllers.LabelRedisShard] = strconv.Itoa(shard)
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
		c := condition(f.Status.Conditions, v1alpha1.FleetRedisReady)
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
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRedirects: 16, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
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
	ctx := context.Background()
	start := time.Now()
	rf := newRedisFleet(t, "redis-boot", "boot", 3, 1)
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1alpha1.ReasonClusterOK)
	t.Logf("bootstrap of 3 shards x 1 replica through the operator: RedisReady=True %v after the fleet was created (pods started before)", time.Since(start).Round(time.Millisecond))

	st := f.Status.Redis
	if st == nil || st.ClusterState != "ok" || st.SlotsAssigned != 16384 || len(st.Primaries) != 3 || len(st.Replicas) != 3 || st.Operation != "" || st.Migration != nil {
		t.Fatalf("status.redis %+v", st)
	}
	for _, n := range append(slices.Clone(st.Primaries), st.Replicas...) {
		if len(n.NodeID) != 40 || n.Link != "connected" || !strings.HasPrefix(n.Address, "127.0.0.") {
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

	// The objects, each owned by the fleet.
	objs := []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: controllers.RedisConfigMapName(f)}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: controllers.RedisName(f)}}}
	for s := range 3 {
		objs = append(objs, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: controllers.RedisShardName(f, s)}},
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: controllers.RedisShardName(f, s)}})
	}
	for _, o := range objs {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: o.GetName()}, o); err != nil {
			t.Errorf("%T %s: %v", o, o.GetName(), err)
		} else if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != f.Name {
			t.Errorf("%T %s owners %+v", o, o.GetName(), refs)
		}
	}
	dep := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: controllers.LimiterName(f)}, dep); err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--store=redis-cluster://boot-redis-0-0.boot-redis.redis-boot.svc:6379,") {
		t.Errorf("limiter args %q", args)
	}

	// A reconcile of the converged cluster sends nothing that mutates it.
	before := rf.mutatingCalls(t)
	f.Spec.Replicas = ptr.To[int32](1) // a new generation: one full pass
	if err := k8s.Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a pass at the new generation", func() error {
		if g := rf.get(t); g.Status.ObservedGeneration != g.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", g.Status.ObservedGeneration, g.Generation)
		}
		return nil
	})
	rf.waitRedisReady(t, 10*time.Second, metav1.ConditionTrue, v1alpha1.ReasonClusterOK)
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
	ctx := context.Background()

	t.Run("garbage", func(t *testing.T) {
		rf := newRedisFleet(t, "redis-garbage", "garbage", 3, 0)
		// Pod 2-0 is replaced by something that is not Redis.
		bad := rf.pods[2]
		bad.srv.Stop()
		garbage := startGarbageServer(t, nextRedisIP(t)+":6379")
		setPodIP(t, rf.fleet.Namespace, bad.name, strings.TrimSuffix(garbage, ":6379"))
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonInvalidReply)
		c := condition(f.Status.Conditions, v1alpha1.FleetRedisReady)
		if !strings.Contains(c.Message, bad.name) {
			t.Errorf("message does not name %s: %s", bad.name, c.Message)
		}
		t.Logf("RedisReady=False %s: %s", c.Reason, c.Message)
		requireReconciling(t, rf)
	})

	t.Run("wrong password", func(t *testing.T) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "redis-auth", Name: "redis-auth"}, Data: map[string][]byte{"password": []byte("not-the-password")}}
		namespace(t, "redis-auth")
		if err := k8s.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, secret) })
		rf := newRedisFleetExtra(t, "redis-auth", "auth", 3, 0, []string{"requirepass right-password", "masterauth right-password"}, func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "redis-auth"}
		})
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonAuthFailed)
		t.Logf("RedisReady=False %s: %s", v1alpha1.ReasonAuthFailed, condition(f.Status.Conditions, v1alpha1.FleetRedisReady).Message)
		requireReconciling(t, rf)

		// The right password: the operator forms the cluster.
		secret.Data["password"] = []byte("right-password")
		if err := k8s.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		// The Secret is not watched; the failing pass requeues itself.
		rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1alpha1.ReasonClusterOK)
	})

	t.Run("missing Secret", func(t *testing.T) {
		rf := newRedisFleet(t, "redis-nosecret", "nosecret", 3, 0, func(f *v1alpha1.LimiterFleet) {
			f.Spec.Redis.Auth = &v1alpha1.RedisAuth{SecretName: "absent"}
		})
		f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonAuthFailed)
		if c := condition(f.Status.Conditions, v1alpha1.FleetRedisReady); !strings.Contains(c.Message, "Secret redis-nosecret/absent not found") {
			t.Errorf("message %q", c.Message)
		}
	})
}

// newRedisFleetExtra is newRedisFleet with extra directives for every node.
func newRedisFleetExtra(t *testing.T, ns, name string, shards, replicas int32, extra []string, mutate ...func(*v1alpha1.LimiterFleet)) *redisFleet {
	t.Helper()
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
	rf := &redisFleet{fleet: f, extra: extra}
	for s := range int(shards) {
		for o := range int(replicas) + 1 {
			rf.addPod(t, s, o)
		}
	}
	if err := k8s.Create(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteFleet(t, f)
		_ = k8s.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels(controllers.RedisSelectorLabels(f)))
	})
	return rf
}

// requireReconciling shows that a failing Redis pass stalls nothing: a spec
// change is still observed and the snapshot still written.
func requireReconciling(t *testing.T, rf *redisFleet) {
	t.Helper()
	f := rf.get(t)
	f.Spec.Enforcement = ptr.To(v1alpha1.EnforcementDisabled)
	if err := k8s.Update(context.Background(), f); err != nil {
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
