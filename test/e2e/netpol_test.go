package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

const (
	// outsiderNS is a tenant's namespace that is none of the Redis Cluster
	// fleet's spec.clients: its pod must not reach the fleet's data ports,
	// its admin port or its Redis.
	outsiderNS = "e2e-outsider"
	// monitoringNS is the chart's networkPolicy.monitoringNamespace: its
	// pods may scrape the limiters' admin port (/metrics).
	monitoringNS = "monitoring"
	// refusedWithin is how long a pod tries to connect before a port counts
	// as closed to it: the allowed pods connect within milliseconds.
	refusedWithin = "10s"
)

// enforced says whether the cluster enforces NetworkPolicies
// (hack/cluster/up.sh with NETPOL=1 runs kube-router's firewall).
func enforced() bool { return os.Getenv("SLUICE_E2E_NETPOL") == "1" }

// networkPolicies checks that the policies the operator renders for the
// Redis Cluster fleet drop what they must and let through what they must,
// on a cluster that enforces them: each refused connection is paired with
// the same address accepted from a pod that may open it.
func (j *journey) networkPolicies(t *testing.T) {
	if !enforced() {
		t.Skip("the cluster enforces no NetworkPolicy (hack/cluster/up.sh NETPOL=0)")
	}
	c, f := j.c, j.fleet
	ctx := context.Background()
	for _, ns := range []string{outsiderNS, monitoringNS} {
		c.restrictedNamespace(t, ns)
		c.clientPod(t, ns, clientPod)
	}
	svc := fmt.Sprintf("%s.%s.svc:8081", resources.LimiterName(betaOf(f)), f.Namespace)
	limiters := &corev1.PodList{}
	if err := c.c.List(ctx, limiters, client.InNamespace(f.Namespace), client.MatchingLabels(resources.LimiterSelectorLabels(betaOf(f)))); err != nil {
		t.Fatal(err)
	}
	redis := &corev1.PodList{}
	if err := c.c.List(ctx, redis, client.InNamespace(f.Namespace), client.MatchingLabels(resources.RedisSelectorLabels(betaOf(f)))); err != nil {
		t.Fatal(err)
	}
	if len(limiters.Items) == 0 || len(redis.Items) == 0 {
		t.Fatalf("%d limiter and %d Redis pods", len(limiters.Items), len(redis.Items))
	}
	// A pod of each node: each node's firewall enforces its own pods' policies.
	admins := onePerNode(limiters.Items, int(limiterwire.AdminPort))
	redisAddrs := onePerNode(redis.Items, int(resources.RedisPort))
	if len(admins) == 0 || len(redisAddrs) == 0 {
		t.Fatalf("no limiter or Redis pod with an IP: %d limiter and %d Redis pods", len(limiters.Items), len(redis.Items))
	}

	// A fleet's client reaches the data port; a tenant outside spec.clients doesn't.
	j.dialFrom(t, appNS, svc)
	j.refusedFrom(t, outsiderNS, svc, "the data port of a fleet whose spec.clients leave its namespace out")
	// Prometheus's namespace reaches the admin port (/metrics); the others don't.
	for _, admin := range admins {
		j.dialFrom(t, monitoringNS, admin)
		j.refusedFrom(t, outsiderNS, admin, "a limiter's admin port")
	}
	j.refusedFrom(t, appNS, admins[0], "a limiter's admin port, from a client of the data ports")
	// No tenant pod reaches Redis, not even the fleet's clients.
	for _, addr := range redisAddrs {
		j.refusedFrom(t, outsiderNS, addr, "a Redis pod")
	}
	j.refusedFrom(t, appNS, redisAddrs[0], "a Redis pod, from a client of the fleet")

	// The operator and the limiters still reach Redis and each other: the
	// operator reads every Redis node (RedisReady) and the limiters decide
	// by their store (an exhausted counter denies).
	waitFor(t, "fleet "+f.Name+" RedisReady and Ready under enforced NetworkPolicies", 2*time.Minute, func() (bool, string) {
		got := c.fleet(t, f.Namespace, f.Name)
		rs, rmsg := condition(got.Status.Conditions, v1beta1.RedisReadyCondition)
		s, msg := condition(got.Status.Conditions, v1beta1.ReadyCondition)
		return rs == metav1.ConditionTrue && s == metav1.ConditionTrue, fmt.Sprintf("RedisReady %s (%s), Ready %s (%s)", rs, rmsg, s, msg)
	})
	var answers []rlsAnswer
	c.execJSON(t, &answers, appNS, clientPod, "/e2eclient", "rls", "-addr", svc, "-domain", "payments-api",
		"-descriptor", "user_id=netpol,path=/v1/charges", "-n", "6")
	var got []string
	for _, a := range answers {
		got = append(got, a.Code+a.Error+a.Reason)
	}
	if len(got) != 6 || got[5] != "OVER_LIMIT" || strings.Join(got[:5], ",") != "OK,OK,OK,OK,OK" {
		t.Errorf("6 calls of the README's request through %s: %v, want 5 OK then OVER_LIMIT, decided by Redis", svc, got)
	}
	j.mark("NetworkPolicies enforced: data port, admin port and Redis closed to %s, open to %s, %s and the operator", outsiderNS, appNS, monitoringNS)
}

// onePerNode is the address, on port, of one of pods on each node.
func onePerNode(pods []corev1.Pod, port int) []string {
	seen := map[string]bool{}
	var addrs []string
	for _, p := range pods {
		if p.Status.PodIP == "" || seen[p.Spec.NodeName] {
			continue
		}
		seen[p.Spec.NodeName] = true
		addrs = append(addrs, fmt.Sprintf("%s:%d", p.Status.PodIP, port))
	}
	return addrs
}

// dialFrom fails the test unless the client pod of ns connects to hostPort
// (within e2eclient dial's minute: a new pod waits for the firewall to
// list it).
func (j *journey) dialFrom(t *testing.T, ns, hostPort string) {
	t.Helper()
	var dialed struct{ After string }
	j.c.execJSON(t, &dialed, ns, clientPod, "/e2eclient", "dial", hostPort)
	t.Logf("%s -> %s: open (%s)", ns, hostPort, dialed.After)
}

// refusedFrom fails the test if the client pod of ns connects to hostPort
// within refusedWithin.
func (j *journey) refusedFrom(t *testing.T, ns, hostPort, what string) {
	t.Helper()
	out, _, err := j.c.cmd("", j.c.kubectlBin, "exec", "-n", ns, clientPod, "--", "/e2eclient", "dial", "-timeout", refusedWithin, hostPort)
	if err == nil {
		t.Errorf("a pod of namespace %s opened %s, %s: %s", ns, hostPort, what, strings.TrimSpace(out))
		return
	}
	t.Logf("%s -> %s (%s): closed (%s)", ns, hostPort, what, dialError(err.Error()))
}

// dialError is e2eclient dial's own error in kubectl exec's output.
func dialError(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "e2eclient:") {
			return l
		}
	}
	return s
}
