package redisfleet

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// TestDataLossRecord: a loss is kept by later passes that find none, shows
// in RedisDataLoss until an annotation at or after its time acknowledges
// it, and a later loss shows again, with the unacknowledged ones before it.
func TestDataLossRecord(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	fleet := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f", Generation: 2},
		Spec: v1beta1.LimiterFleetSpec{Store: v1beta1.Store{Type: v1beta1.StoreCluster}}}
	pass := func(at time.Time, loss string) *Scope {
		return &Scope{Now: at, Result: rediscluster.Result{DataLoss: loss}}
	}
	// step runs one pass's bookkeeping and returns the condition.
	step := func(rs *Scope) *metav1.Condition {
		prev := fleet.Status.Redis
		fleet.Status.Redis = &v1beta1.RedisStatus{}
		RecordDataLoss(fleet, prev, fleet.Status.Redis, rs)
		SetDataLossCondition(fleet)
		return meta.FindStatusCondition(fleet.Status.Conditions, v1beta1.RedisDataLossCondition)
	}
	want := func(what string, c *metav1.Condition, status metav1.ConditionStatus, reason string, msgs ...string) {
		t.Helper()
		ok := c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == 2
		for _, m := range msgs {
			ok = ok && strings.Contains(c.Message, m)
		}
		if !ok {
			t.Errorf("%s: RedisDataLoss %+v, want %s %s with %q", what, c, status, reason, msgs)
		}
	}

	want("a healthy pass", step(pass(t0, "")), "False", v1beta1.NoDataLossReason)
	want("the pass that lost slots", step(pass(t0.Add(500*time.Millisecond), "node abc served slots 0-5460 and is gone with every replica: its keys are lost")),
		"True", v1beta1.DataLostReason, "at 2026-11-23T10:00:00Z, node abc served slots 0-5460", "kubectl annotate limiterfleet -n ns f ratelimit.sluice.dev/data-loss-acknowledged=2026-11-23T10:00:00Z")
	want("the next pass, which assigns them", step(pass(t0.Add(time.Second), "slots 0-5460 were served by no node and their data is gone; assigned empty to shard 0 (f-redis-0-0)")),
		"True", v1beta1.DataLostReason, "at 2026-11-23T10:00:01Z, slots 0-5460 were served by no node", "; node abc served slots 0-5460")
	for i := range 3 {
		want("a later healthy pass", step(pass(t0.Add(time.Duration(10+i)*time.Second), "")), "True", v1beta1.DataLostReason, "node abc")
	}
	want("the Redis phase did not run", step(nil), "True", v1beta1.DataLostReason, "node abc")

	fleet.Annotations = map[string]string{v1beta1.AnnotationDataLossAcknowledged: "yesterday"}
	want("an annotation that is no time", step(pass(t0.Add(time.Minute), "")), "True", v1beta1.DataLostReason, `"yesterday" is not an RFC 3339 time`)
	fleet.Annotations[v1beta1.AnnotationDataLossAcknowledged] = "2026-11-23T10:00:00Z"
	want("acknowledged before the last loss", step(pass(t0.Add(time.Minute), "")), "True", v1beta1.DataLostReason)
	fleet.Annotations[v1beta1.AnnotationDataLossAcknowledged] = "2026-11-23T10:00:01Z"
	want("acknowledged", step(pass(t0.Add(time.Minute), "")), "False", v1beta1.DataLossAcknowledgedReason, "node abc")

	want("a new loss", step(pass(t0.Add(time.Hour), "node def served slots 5461-10922 and is gone with every replica: its keys are lost")),
		"True", v1beta1.DataLostReason, "at 2026-11-23T11:00:00Z, node def")
	if strings.Contains(fleet.Status.Redis.DataLoss, "node abc") {
		t.Errorf("the acknowledged loss is still in dataLoss: %q", fleet.Status.Redis.DataLoss)
	}

	fleet.Spec.Store.Type = v1beta1.StoreMemory
	SetDataLossCondition(fleet)
	if c := meta.FindStatusCondition(fleet.Status.Conditions, v1beta1.RedisDataLossCondition); c != nil {
		t.Errorf("mode None keeps RedisDataLoss %+v", c)
	}
}
