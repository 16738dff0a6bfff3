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
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	goredis "github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/storetest"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// nodeClient is a client of one node as user (empty: no AUTH at all).
func nodeClient(t testing.TB, addr, user, password string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, Username: user, Password: password, Protocol: 2,
		MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// aclLog is a node's ACL LOG as "username reason object" entries.
func aclLog(t testing.TB, p *redisPod) []string {
	t.Helper()
	v, err := p.srv.Client(t).Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatalf("ACL LOG on %s: %v", p.name, err)
	}
	var out []string
	for _, e := range v {
		f := map[string]any{}
		switch e := e.(type) {
		case map[any]any:
			for k, v := range e {
				f[fmt.Sprint(k)] = v
			}
		case []any:
			for i := 0; i+1 < len(e); i += 2 {
				f[fmt.Sprint(e[i])] = e[i+1]
			}
		}
		out = append(out, fmt.Sprintf("%v %v %v", f["username"], f["reason"], f["object"]))
	}
	return out
}

// TestRedisClusterLockedDown: a Cluster fleet without redis.auth gets a
// generated auth Secret, and its nodes, real redis-server processes started
// with the rendered redis.conf and that Secret's users file, are locked
// down. The operator forms and replicates the cluster as its own user, the
// limiters' store passes the conformance table as theirs, and no node
// refused either. Then: a client that does not authenticate is refused
// every command; the limiters' user is refused FLUSHALL, CONFIG, CLUSTER
// RESET, SHUTDOWN, KEYS and keys that are not the store's; the operator's
// user is refused what its engine never sends.
func TestRedisClusterLockedDown(t *testing.T) {
	ctx := context.Background()
	rf := newRedisFleet(t, "redis-locked", "locked", 3, 1)
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	if n := len(f.Status.Redis.Replicas); n != 3 {
		t.Fatalf("%d replicas in status, want 3 (replication as %s)", n, resources.RedisReplicationUser)
	}

	secret := rf.authSecret(t)
	if refs := secret.OwnerReferences; len(refs) != 1 || refs[0].Name != f.Name || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("auth Secret owners %+v: want the fleet as controller", refs)
	}
	pw := func(key string) string {
		v := string(secret.Data[key])
		if len(v) < 32 {
			t.Fatalf("auth Secret %s: %d characters, want a generated password", key, len(v))
		}
		return v
	}
	limiterPW, operatorPW, replicationPW := pw(resources.RedisLimiterPasswordKey), pw(resources.RedisOperatorPasswordKey), pw(resources.RedisReplicationPasswordKey)

	// The limiters' store, as sluice-limiter with the Secret's password.
	var addrs []string
	for _, p := range rf.pods {
		addrs = append(addrs, p.addr())
	}
	newStore := func(t *testing.T, clock store.Clock) store.Store {
		s, err := redisstore.New(redisstore.Options{Addrs: addrs, Cluster: true, Username: resources.RedisLimiterUser, Password: limiterPW,
			Timeout: 2 * time.Second, PinnedClock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("store conformance as sluice-limiter", func(t *testing.T) { storetest.Run(t, newStore) })
	t.Run("idempotency as sluice-limiter", func(t *testing.T) { storetest.RunIdempotency(t, newStore) })
	for _, p := range rf.pods {
		if denied := aclLog(t, p); len(denied) > 0 {
			t.Errorf("%s refused the operator, a replica or the store: %s", p.name, strings.Join(denied, "; "))
		}
	}

	primary := rf.pod(t, f.Status.Redis.Primaries[0].Pod).addr()
	refused := func(user, password, prefix string, cmds ...[]any) {
		t.Helper()
		c := nodeClient(t, primary, user, password)
		for _, cmd := range cmds {
			err := c.Do(ctx, cmd...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("%v as %q: %v, want %s", cmd, user, err, prefix)
			}
		}
	}
	// No AUTH: nothing at all, not even PING.
	refused("", "", "NOAUTH",
		[]any{"PING"}, []any{"GET", "sl:{x}"}, []any{"SET", "k", "v"}, []any{"FLUSHALL"}, []any{"CONFIG", "GET", "*"},
		[]any{"CLUSTER", "INFO"}, []any{"CLUSTER", "RESET"}, []any{"INFO"}, []any{"KEYS", "*"}, []any{"SHUTDOWN"},
		[]any{"EVAL", "return 1", "0"}, []any{"ACL", "WHOAMI"})
	// The default user is off, with or without a password.
	if err := nodeClient(t, primary, "default", "").Ping(ctx).Err(); err == nil {
		t.Errorf("the default user authenticates")
	}
	limiterCmds := [][]any{{"FLUSHALL"}, {"FLUSHDB"}, {"CONFIG", "GET", "*"}, {"CONFIG", "SET", "maxmemory", "1"},
		{"CLUSTER", "RESET"}, {"CLUSTER", "FAILOVER"}, {"SHUTDOWN"}, {"KEYS", "*"}, {"SCAN", "0"}, {"DEL", "sl:{x}"},
		{"SCRIPT", "FLUSH"}, {"ACL", "LIST"}, {"REPLICAOF", "NO", "ONE"}}
	refused(resources.RedisLimiterUser, limiterPW, "NOPERM", append(limiterCmds, []any{"GET", "other:key"}, []any{"SET", "other:key", "v"})...)
	refused(resources.RedisOperatorUser, operatorPW, "NOPERM",
		[]any{"FLUSHALL"}, []any{"CONFIG", "GET", "*"}, []any{"CLUSTER", "RESET"}, []any{"SHUTDOWN"}, []any{"KEYS", "*"},
		[]any{"GET", "sl:{x}"}, []any{"EVAL", "return 1", "0"}, []any{"ACL", "LIST"})
	refused(resources.RedisReplicationUser, replicationPW, "NOPERM",
		[]any{"GET", "sl:{x}"}, []any{"FLUSHALL"}, []any{"CLUSTER", "NODES"}, []any{"CONFIG", "GET", "*"})
	// Each password is its own user's only.
	if err := nodeClient(t, primary, resources.RedisOperatorUser, limiterPW).Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Errorf("the limiters' password authenticates the operator's user: %v", err)
	}
}

// TestRedisMemoryBound: the rendered redis.conf bounds memory with
// maxmemory (spec.redis.maxMemory here, 75% of the memory limit by
// default) and maxmemory-policy allkeys-lru. A node filled to 90% of it
// makes RedisReady False with reason MemoryNearLimit, naming the pod, and
// the operator exports its used memory and maxmemory for the alert. Filled
// past it, the node evicts the keys least recently used: the limiters' store
// keeps deciding on that shard (under noeviction, every decision there
// would fail with OOM).
func TestRedisMemoryBound(t *testing.T) {
	ctx := context.Background()
	const maxMemory = 8 << 20
	rf := newRedisFleet(t, "redis-mem", "mem", 3, 0, func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.MaxMemory = ptr.To(resource.MustParse("8Mi"))
	})
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	victim := rf.pod(t, f.Status.Redis.Primaries[0].Pod)
	admin := victim.srv.Client(t)
	for name, want := range map[string]string{"maxmemory": fmt.Sprint(maxMemory), "maxmemory-policy": "allkeys-lru"} {
		got, err := admin.ConfigGet(ctx, name).Result()
		if err != nil || got[name] != want {
			t.Errorf("CONFIG GET %s = %v (%v), want %s", name, got, err, want)
		}
	}
	for _, n := range f.Status.Redis.Primaries {
		if n.MaxMemoryBytes != maxMemory || n.UsedMemoryBytes <= 0 || n.UsedMemoryBytes >= maxMemory {
			t.Errorf("status of %s: used %d, max %d", n.Pod, n.UsedMemoryBytes, n.MaxMemoryBytes)
		}
	}

	// Fill the victim's own slots to 96% with keys that expire in an hour,
	// as counters do: one hash tag of a slot it serves.
	tag := ""
	for i := 0; tag == ""; i++ {
		if err := admin.Set(ctx, fmt.Sprintf("fill:{t%d}:probe", i), 1, time.Hour).Err(); err == nil {
			tag = fmt.Sprintf("t%d", i)
		} else if !strings.HasPrefix(err.Error(), "MOVED") {
			t.Fatal(err)
		}
	}
	usedMemory := func() int64 {
		info, err := admin.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		var used int64
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				_, _ = fmt.Sscan(v, &used)
			}
		}
		return used
	}
	// Small batches, and a target well past the 90% line: used_memory
	// counts the filling client's query buffer, which Redis frees a few
	// seconds later (a 92% fill in batches of 50 read 89% by the time
	// the operator looked).
	fill := func(until float64) int {
		n := 0
		for {
			if float64(usedMemory()) >= until*maxMemory {
				return n
			}
			_, err := admin.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for range 10 {
					p.Set(ctx, fmt.Sprintf("fill:{%s}:%d", tag, n), strings.Repeat("x", 2048), time.Hour)
					n++
				}
				return nil
			})
			if err != nil {
				t.Fatalf("filling %s after %d keys: %v", victim.name, n, err)
			}
		}
	}
	keys := fill(0.96)
	kick := func() { // a pass now rather than at the 30s resync
		g := rf.get(t)
		orig := g.DeepCopy()
		g.Spec.Replicas = ptr.To(1 - *g.Spec.Replicas%2)
		if err := k8s.Patch(ctx, g, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	kick()
	t.Logf("%s: used_memory %d of %d after %d keys", victim.name, usedMemory(), maxMemory, keys)
	// The condition is awaited with the node kept near its limit: a reading
	// at the end of a fill can hold transient memory (a 96% reading once
	// settled at 87%), so a node found under 93% is topped up and the
	// operator asked for a pass again.
	eventually(t, 30*time.Second, "RedisReady=False MemoryNearLimit", func() error {
		if used := usedMemory(); float64(used) < 0.93*maxMemory {
			keys += fill(0.96)
			kick()
			return fmt.Errorf("%s's used_memory was %d, under 93%% of %d: topped up to %d keys", victim.name, used, maxMemory, keys)
		}
		g := rf.get(t)
		c := condition(g.Status.Conditions, v1beta1.RedisReadyCondition)
		switch {
		case c == nil:
			return fmt.Errorf("no RedisReady yet")
		case c.ObservedGeneration != g.Generation || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.MemoryNearLimitReason:
			return fmt.Errorf("RedisReady=%s (%s) at generation %d/%d: %s; %s's used_memory now %d; status: %s", c.Status, c.Reason,
				c.ObservedGeneration, g.Generation, c.Message, victim.name, usedMemory(), nodeMemory(g))
		}
		f = g
		return nil
	})
	c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition)
	if !strings.Contains(c.Message, victim.name+" uses ") || !strings.Contains(c.Message, "of its maxmemory 8Mi") {
		t.Errorf("RedisReady message %q does not name %s and its maxmemory", c.Message, victim.name)
	}
	t.Logf("%d keys of 2KiB on %s: RedisReady=False %s: %s", keys, victim.name, c.Reason, c.Message)
	used, max := operatorGauge(t, "sluice_operator_redis_used_memory_bytes", victim.name), operatorGauge(t, "sluice_operator_redis_maxmemory_bytes", victim.name)
	if max != maxMemory || used <= 0 || used > 2*maxMemory {
		t.Errorf("operator metrics for %s: used %v, maxmemory %v", victim.name, used, max)
	}

	// Past maxmemory (another 16MiB of keys): writes go on, and the keys
	// least recently used are evicted.
	for lo := keys; lo < keys+8192; lo += 256 {
		_, err := admin.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := lo; i < lo+256; i++ {
				p.Set(ctx, fmt.Sprintf("fill:{%s}:%d", tag, i), strings.Repeat("x", 2048), time.Hour+time.Duration(i)*time.Millisecond)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("writing past maxmemory: %v", err)
		}
	}
	keys += 8192
	st, err := redisstore.New(redisstore.Options{Addrs: []string{victim.addr()}, Cluster: true, Username: resources.RedisLimiterUser,
		Password: string(rf.authSecret(t).Data[resources.RedisLimiterPasswordKey]), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim := algo.Limit{Algorithm: algo.SlidingLog, Limit: 100, Period: time.Hour}
	for i := range 200 {
		var b store.KeyBuilder
		b.Add(fmt.Sprint("full-", i))
		if _, err := st.Take(ctx, store.Request{Key: b.Key(), Limit: lim, Cost: 1}); err != nil {
			t.Fatalf("decision %d on a full node: %v", i, err)
		}
	}
	info, err := admin.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "evicted_keys:") || strings.Contains(info, "evicted_keys:0\r") {
		t.Errorf("no key evicted after %d keys:\n%s", keys, info)
	}
	t.Logf("%d keys written, 200 limiter decisions on the full node without an error", keys)
}

// nodeMemory lists status.redis's used and max memory per primary.
func nodeMemory(f *v1alpha1.LimiterFleet) string {
	if f.Status.Redis == nil {
		return "no status.redis"
	}
	var out []string
	for _, n := range f.Status.Redis.Primaries {
		out = append(out, fmt.Sprintf("%s %d/%d", n.Pod, n.UsedMemoryBytes, n.MaxMemoryBytes))
	}
	return strings.Join(out, ", ")
}

// operatorGauge reads a gauge of the operator's metrics for a pod.
func operatorGauge(t testing.TB, name, pod string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "pod") == pod {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s for pod %s", name, pod)
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestRedisClusterTLS: a Cluster fleet with spec.redis.tls. Its nodes, real
// redis-server processes with the rendered redis.conf and the operator's
// certificate, serve TLS only on the pods' port, for clients, replication
// and the cluster bus; the operator forms the cluster with replicas over
// TLS, verifying the certificate against the CA it created, and limiters
// started as the Deployment says (rediss-cluster://, the CA file, the
// server name) decide against it. A plain-text client gets no Redis reply,
// a client that trusts another CA fails the handshake, and one that trusts
// the fleet's CA still must authenticate. A certificate near expiry is
// replaced and rolls the pods.
func TestRedisClusterTLS(t *testing.T) {
	ctx := context.Background()
	rf := newRedisFleet(t, "redis-tls-cluster", "tlsc", 3, 1, func(f *v1alpha1.LimiterFleet) { f.Spec.Redis.TLS = &v1alpha1.RedisTLS{} })
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	for _, n := range f.Status.Redis.Replicas {
		if n.Link != "connected" {
			t.Errorf("replica %+v", n)
		}
	}
	if n := len(f.Status.Redis.Replicas); n != 3 {
		t.Fatalf("%d replicas, want 3 (replication over TLS)", n)
	}
	for _, p := range rf.pods {
		info, err := p.srv.Client(t).Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
			t.Errorf("%s: replica not in sync:\n%s", p.name, info)
		}
	}
	ca := rf.secret(t, resources.RedisCASecretName(betaOf(f)))
	tlsSecret := rf.secret(t, resources.RedisTLSSecretName(betaOf(f)))
	for _, s := range []*corev1.Secret{ca, tlsSecret} {
		if !metav1.IsControlledBy(s, f) {
			t.Errorf("Secret %s is not controlled by the fleet", s.Name)
		}
	}
	conf, err := redisfleet.RedisClientTLS(betaOf(f), tlsSecret)
	if err != nil {
		t.Fatal(err)
	}
	podAddr := func(p *redisPod) string { h, _, _ := net.SplitHostPort(p.addr()); return h + ":6379" }
	primary := rf.pod(t, f.Status.Redis.Primaries[0].Pod)

	// The cluster bus (6379 + 10000) is TLS with the fleet's certificate.
	bus, err := tls.Dial("tcp", strings.TrimSuffix(podAddr(primary), ":6379")+":16379", conf)
	if err != nil {
		t.Errorf("TLS handshake with the cluster bus of %s: %v", primary.name, err)
	} else {
		bus.Close()
	}

	// Clients: plain text, another CA, no AUTH, the limiters' user.
	plain := goredis.NewClient(&goredis.Options{Addr: podAddr(primary), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("a plain-text PING to the pod's port: %v, want no Redis reply", err)
	}
	otherCA, _, err := redisfleet.NewRedisCA(betaOf(f), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherPool := x509.NewCertPool()
	otherPool.AddCert(otherCA.Cert)
	stranger := goredis.NewClient(&goredis.Options{Addr: podAddr(primary), MaxRetries: -1, DialTimeout: time.Second,
		TLSConfig: &tls.Config{RootCAs: otherPool, ServerName: conf.ServerName}})
	defer stranger.Close()
	if err := stranger.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client that trusts another CA: %v, want a certificate error", err)
	}
	anon := goredis.NewClient(&goredis.Options{Addr: podAddr(primary), MaxRetries: -1, DialTimeout: time.Second, TLSConfig: conf})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("a TLS client without AUTH: %v, want NOAUTH", err)
	}

	// Limiters as the Deployment runs them decide against the cluster.
	load := rf.startLimiters(t, 2)
	allowed := func() int64 {
		if v, ok := load.codes.Load(200); ok {
			return v.(*atomic.Int64).Load()
		}
		return 0
	}
	eventually(t, 30*time.Second, "decisions from Redis over TLS", func() error {
		if n := allowed(); n < 200 {
			return fmt.Errorf("%d allowed so far (a store error answers 429, failureMode Closed)", n)
		}
		return nil
	})
	load.halt()
	summary, _ := load.summary(t)
	t.Logf("limiters over TLS: %s", summary)
	if n := load.errorsOfClass(t, "connection"); n != 0 {
		t.Errorf("%.0f calls of the limiters could not reach a node over TLS: %s", n, summary)
	}
	for _, p := range rf.pods {
		if denied := aclLog(t, p); len(denied) > 0 {
			t.Errorf("%s refused: %s", p.name, strings.Join(denied, "; "))
		}
	}

	// A certificate 20 days from expiry, from the same CA: the operator
	// issues the next, and the pods' template changes to roll them.
	hashBefore := statefulSetAnnotation(t, f, resources.RedisTLSHashAnnotation)
	caCert, err := redisfleet.ParseRedisCA(ca.Data["tls.crt"], ca.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	oldPEM, oldKey, err := redisfleet.IssueRedisCert(betaOf(f), caCert, time.Now().Add(-70*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tlsSecret.Data["tls.crt"], tlsSecret.Data["tls.key"] = oldPEM, oldKey
	if err := k8s.Update(ctx, tlsSecret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "a new certificate", func() error {
		s := rf.secret(t, resources.RedisTLSSecretName(betaOf(f)))
		if why := redisfleet.RedisCertCurrent(betaOf(f), caCert, s.Data["tls.crt"], time.Now()); why != "" {
			return fmt.Errorf("the certificate is not current: %s", why)
		}
		if h := statefulSetAnnotation(t, f, resources.RedisTLSHashAnnotation); h == hashBefore || h == "" {
			return fmt.Errorf("the pods' TLS hash is still %q", h)
		}
		return nil
	})
}

// statefulSetAnnotation is an annotation of shard 0's pod template.
func statefulSetAnnotation(t *testing.T, f *v1alpha1.LimiterFleet, name string) string {
	t.Helper()
	set := &appsv1.StatefulSet{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.Namespace, Name: resources.RedisShardName(betaOf(f), 0)}, set); err != nil {
		t.Fatal(err)
	}
	return set.Spec.Template.Annotations[name]
}

// TestRedisClusterTLSOwnCA: with spec.redis.tls.caSecretName, the operator
// signs the nodes' certificate with that CA and creates none of its own;
// until the Secret exists, RedisReady is False with reason AuthFailed,
// naming it.
func TestRedisClusterTLSOwnCA(t *testing.T) {
	ctx := context.Background()
	rf := createRedisFleet(t, "redis-own-ca", "ownca", 3, 0, nil, func(f *v1alpha1.LimiterFleet) {
		f.Spec.Redis.TLS = &v1alpha1.RedisTLS{CASecretName: ptr.To("team-ca")}
	})
	f := rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1beta1.AuthFailedReason)
	if c := condition(f.Status.Conditions, v1beta1.RedisReadyCondition); !strings.Contains(c.Message, "Secret redis-own-ca/team-ca not found") {
		t.Errorf("RedisReady message %q does not name the CA Secret", c.Message)
	}
	ca, keyPEM, err := redisfleet.NewRedisCA(betaOf(f), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "team-ca"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": ca.CertPEM, "tls.key": keyPEM}}
	if err := k8s.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	rf.waitRedisReady(t, 30*time.Second, metav1.ConditionFalse, v1beta1.WaitingForNodesReason) // no pods: past the Secrets
	s := rf.secret(t, resources.RedisTLSSecretName(betaOf(f)))
	if why := redisfleet.RedisCertCurrent(betaOf(f), ca, s.Data["tls.crt"], time.Now()); why != "" {
		t.Errorf("the node certificate: %s", why)
	}
	if string(s.Data["ca.crt"]) != string(ca.CertPEM) {
		t.Errorf("ca.crt is not the team's CA")
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: resources.RedisCASecretName(betaOf(f))}, &corev1.Secret{}); err == nil {
		t.Errorf("the operator created a CA of its own")
	}
}
