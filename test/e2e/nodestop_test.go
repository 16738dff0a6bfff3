package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// nodeDownFor is how long NodeStopped keeps the node down: a reboot's
// time, under the node controller's grace period (40s), so the node is
// never NotReady and no pod is evicted.
const nodeDownFor = 30 * time.Second

// clusterNodes are the nodes up.sh started, node 1 (the control plane's)
// first, from SLUICE_E2E_CONTAINERD ("NODE=SOCKET ...").
func clusterNodes() []string {
	var out []string
	for _, kv := range strings.Fields(os.Getenv("SLUICE_E2E_CONTAINERD")) {
		if n, _, ok := strings.Cut(kv, "="); ok {
			out = append(out, n)
		}
	}
	return out
}

// firstNode is node 1, the host's, which runs the control plane and is
// never stopped; "" when up.sh did not say.
func firstNode() string {
	if ns := clusterNodes(); len(ns) > 0 {
		return ns[0]
	}
	return ""
}

// nodeScript runs hack/cluster/node.sh action on node (stop or start).
func (c *cluster) nodeScript(t *testing.T, action, node string) {
	t.Helper()
	i := slices.Index(clusterNodes(), node)
	if i < 1 {
		t.Fatalf("node %s: not one of the nodes up.sh started after the first (%v)", node, clusterNodes())
	}
	out, errOut, err := c.cmd("", "bash", filepath.Join(c.root, "hack/cluster/node.sh"), action, fmt.Sprint(i+1))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node.sh %s %d: %s%s", action, i+1, out, errOut)
}

// nodeStopped is the fault of a node losing every process at once, as in
// a power cut, and starting again nodeDownFor later: the node the client
// pod does not run on, with whatever Redis masters and limiter pods it
// has. Each master there is failed over by its replica on the other node
// (the Redis Cluster's own election, after spec.redis.nodeTimeout); the
// kubelet, back, makes its pods again (new sandboxes, new IPs) and the old
// masters rejoin as replicas. The share of the minute around it that
// failed is measured and told, not judged: the keys of each master on the
// node fail closed until its replica is elected (spec.redis.nodeTimeout,
// 2s, and an election), and for as long as the node is down when it held
// two of the three masters (no majority is left to elect), until the
// operator's takeover a node timeout after: the leader's, or a standby's
// when the leader went down with them (docs/operations/redis-cluster.md).
// The load's client balances over the pods (faultScenario.balanced), so the node's limiter pods cost only the
// calls in flight on them. The same load under failureMode Local runs
// beside it (faultScenario.localToo): its keys are decided from each
// limiter's share meanwhile, so only the calls in flight fail.
func (j *journey) nodeStopped(redisPods func() []corev1.Pod) faultScenario {
	c, f := j.c, j.fleet
	return faultScenario{
		name: "NodeStopped", title: "node stopped", redis: true, twoNodes: true, reportShare: true, restartsLimiters: true, balanced: true, localToo: true,
		prepare: func(t *testing.T) string { return j.primariesOnto(t, j.otherNode(t), redisPods) },
		inject: func(t *testing.T, start time.Time) func(*testing.T) string {
			node := j.otherNode(t)
			masters := j.redisMastersOn(t, node, redisPods)
			limiters := j.limiterPodsOn(t, node)
			operators := j.operatorPodsOn(t, node)
			// The stop's time is taken before node.sh, which returns only
			// seconds after the node's processes are gone: the chain's
			// times and the limiters' log lines count from it.
			stopped := time.Now()
			c.nodeScript(t, "stop", node)
			stopTook := since(stopped)
			chain := j.redisReadyChain(stopped)
			// Down for a reboot's time, the load running on; the operator
			// may be on the node too, so what it says is read after.
			time.Sleep(nodeDownFor)
			c.nodeScript(t, "start", node)
			restarted := since(start)
			return func(t *testing.T) string {
				waitFor(t, "every pod of the fleet on node "+node+" running again and ready", 5*time.Minute, func() (bool, string) {
					pods := &corev1.PodList{}
					if err := c.c.List(context.Background(), pods, client.InNamespace(f.Namespace), client.MatchingLabels{resources.LabelInstance: f.Name}); err != nil {
						return false, err.Error()
					}
					var waiting []string
					for _, p := range pods.Items {
						if p.Spec.NodeName == node && (!isReady(&p) || !startedAfter(&p, stopped)) {
							waiting = append(waiting, p.Name+": "+podState(&p))
						}
					}
					return len(waiting) == 0, strings.Join(waiting, "; ")
				})
				// Each master of the node failed over to its replica, as the
				// fleet's status tells it: by Redis Cluster's election when
				// the live masters are a majority, else by the operator's
				// FAILOVER TAKEOVER, a node timeout after, when the
				// operator is not on the node too (with one replica, its pod
				// there is gone until the node is back, and so is the
				// takeover). Told, not judged.
				var failedOver []string
				if st := j.c.fleet(t, f.Namespace, f.Name).Status.Redis; st != nil {
					for shard, pod := range masters {
						served := pod + " still"
						for _, p := range st.Primaries {
							if p.Shard == shard && p.Slots > 0 && p.Pod != pod {
								served = "to " + p.Pod
							}
						}
						failedOver = append(failedOver, fmt.Sprintf("shard %d %s", shard, served))
					}
				}
				slices.Sort(failedOver)
				return fmt.Sprintf("node %s stopped %s after the fault's start (Redis masters %v, limiter pods %v, operator pods %v; node.sh stop returned %s after) for %v, started again %s after, its pods running and ready %s after; masters after: [%s]; RedisReady after the stop: %s; the limiters' logs after the stop: %s",
					node, stopped.Sub(start).Round(100*time.Millisecond), masters, limiters, operators, stopTook, nodeDownFor, restarted, since(start), strings.Join(failedOver, ", "), chain(), j.limiterFailoverLog(stopped))
			}
		},
	}
}

// startedAfter reports that every container of p runs since after t.
func startedAfter(p *corev1.Pod, t time.Time) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil || !cs.State.Running.StartedAt.After(t) {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// redisMastersOn maps the shards whose master (status.redis.primaries,
// serving slots) runs on node to that master's pod.
func (j *journey) redisMastersOn(t *testing.T, node string, redisPods func() []corev1.Pod) map[int32]string {
	t.Helper()
	onNode := map[string]bool{}
	for _, p := range redisPods() {
		onNode[p.Name] = p.Spec.NodeName == node
	}
	f := &v1alpha1.LimiterFleet{}
	if err := j.c.c.Get(context.Background(), client.ObjectKeyFromObject(j.fleet), f); err != nil {
		t.Fatal(err)
	}
	out := map[int32]string{}
	if f.Status.Redis != nil {
		for _, p := range f.Status.Redis.Primaries {
			if onNode[p.Pod] && p.Slots > 0 {
				out[p.Shard] = p.Pod
			}
		}
	}
	return out
}

// limiterPodsOn names the fleet's limiter pods on node.
func (j *journey) limiterPodsOn(t *testing.T, node string) []string {
	t.Helper()
	return j.podsOn(t, node, j.fleet.Namespace, resources.LabelInstance+"="+j.fleet.Name+","+resources.LabelComponent+"="+resources.LimiterComponent)
}

// operatorPodsOn names the operator's pods on node: with one replica
// there, no operator is left to fail over a master the live ones can't
// elect a replica for (FAILOVER TAKEOVER) until the node is back.
func (j *journey) operatorPodsOn(t *testing.T, node string) []string {
	t.Helper()
	return j.podsOn(t, node, system, "app.kubernetes.io/component=operator")
}

// podsOn names the pods of namespace ns matching selector on node.
func (j *journey) podsOn(t *testing.T, node, ns, selector string) []string {
	t.Helper()
	pods, err := j.c.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node {
			out = append(out, p.Name)
		}
	}
	return out
}

// primariesOnto makes the pod on node the primary of every shard: CLUSTER
// FAILOVER, as the operator's user, on each shard's replica there, then
// waits until the fleet's status says so. NodeStopped then stops the node
// with every master on it: the worst a two-node cluster meets (no majority
// of masters is left to elect a replica), in every run alike, where
// before it stopped one, two or three masters as the scheduling fell.
func (j *journey) primariesOnto(t *testing.T, node string, redisPods func() []corev1.Pod) string {
	t.Helper()
	ctx := context.Background()
	f := j.c.fleet(t, j.fleet.Namespace, j.fleet.Name)
	if f.Status.Redis == nil {
		t.Fatal("the fleet's status has no Redis")
	}
	secret, err := j.c.cs.CoreV1().Secrets(f.Namespace).Get(ctx, resources.RedisAuthSecretName(betaOf(f)), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	password := string(secret.Data[resources.RedisOperatorPasswordKey])
	onNode := map[int32]string{} // shard -> its pod on node
	for _, p := range redisPods() {
		for _, pr := range f.Status.Redis.Primaries {
			if p.Spec.NodeName == node && strings.HasPrefix(p.Name, resources.RedisShardName(betaOf(f), int(pr.Shard))+"-") {
				onNode[pr.Shard] = p.Name
			}
		}
	}
	var moved []string
	for _, p := range f.Status.Redis.Primaries {
		pod, ok := onNode[p.Shard]
		if p.Slots == 0 || p.Pod == pod {
			continue
		}
		if !ok {
			t.Fatalf("shard %d has no pod on node %s", p.Shard, node)
		}
		addr := strings.TrimPrefix(j.c.portForward(t, f.Namespace, "pod/"+pod, int(resources.RedisPort)), "https://")
		rdb := redis.NewClient(&redis.Options{Addr: addr, Username: resources.RedisOperatorUser, Password: password})
		// CLUSTER FAILOVER is refused while the replica's link to its
		// master is down (a resync after the fault before): sent again
		// until it took.
		var sent time.Time
		waitFor(t, pod+" the master of shard "+fmt.Sprint(p.Shard), 2*time.Minute, func() (bool, string) {
			info, err := rdb.Info(ctx, "replication").Result()
			if err != nil {
				return false, err.Error()
			}
			role, _, _ := strings.Cut(info[max(strings.Index(info, "role:"), 0):], "\n")
			if strings.HasPrefix(role, "role:master") {
				return true, ""
			}
			if time.Since(sent) > 10*time.Second {
				sent = time.Now()
				if err := rdb.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
					return false, "CLUSTER FAILOVER: " + err.Error()
				}
			}
			return false, strings.TrimSpace(role)
		})
		_ = rdb.Close()
		moved = append(moved, fmt.Sprintf("shard %d %s -> %s", p.Shard, p.Pod, pod))
	}
	waitFor(t, "the fleet's status naming every master on node "+node, 2*time.Minute, func() (bool, string) {
		masters := j.redisMastersOn(t, node, redisPods)
		return len(masters) == len(onNode), fmt.Sprint(masters)
	})
	if len(moved) == 0 {
		return "every master already on node " + node
	}
	return fmt.Sprintf("every master moved to node %s first (CLUSTER FAILOVER: %s)", node, strings.Join(moved, ", "))
}
