package controllers

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
)

// TestClusterRedisReadyFromLimiters: for a Cluster fleet the operator finds
// ok, RedisReady also needs the limiter pods: False StoreUnreachable while
// one reports its store failing, False WaitingForLimiters after the
// cluster settled until each has checked it since, True then. With no
// change seen (settledAt zero, as after an operator restart) the pods'
// earlier checks count.
func TestClusterRedisReadyFromLimiters(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ok := rediscluster.Result{Converged: true, Status: rediscluster.Status{ClusterState: "ok", SlotsAssigned: rediscluster.SlotCount}}
	ack := func(addr string, checked time.Time, storeErr string) observe.PodAck {
		return observe.PodAck{Addr: addr, Answered: true, CheckedAt: checked, StoreErr: storeErr}
	}
	for _, tc := range []struct {
		name      string
		result    rediscluster.Result
		settledAt time.Time
		acks      []observe.PodAck
		status    metav1.ConditionStatus
		reason    string
		message   string
	}{
		{"no change seen, pods fine", ok, time.Time{}, []observe.PodAck{ack("a:1", t0.Add(-time.Hour), ""), ack("b:1", t0.Add(-time.Hour), "")},
			"True", v1beta1.ClusterOKReason, ""},
		{"settled, one pod has not checked since", ok, t0, []observe.PodAck{ack("a:1", t0.Add(time.Second), ""), ack("b:1", t0.Add(-time.Second), "")},
			"False", v1beta1.WaitingForLimitersReason, "1/2 limiter pods have not reached it since: b:1"},
		{"settled, both checked since", ok, t0, []observe.PodAck{ack("a:1", t0, ""), ack("b:1", t0.Add(time.Second), "")},
			"True", v1beta1.ClusterOKReason, ""},
		{"a pod can't use it", ok, t0, []observe.PodAck{ack("a:1", t0.Add(time.Second), ""), ack("b:1", t0.Add(time.Second), "ping failed: dial tcp 10.0.0.9:6379: i/o timeout")},
			"False", v1beta1.StoreUnreachableReason, "1/2 limiter pods can't use Redis, and answer by each policy's failureMode: b:1: ping failed"},
		{"the operator's own view comes first", rediscluster.Result{Status: rediscluster.Status{ClusterState: "fail", Operation: rediscluster.OperationHealing}}, t0,
			[]observe.PodAck{ack("a:1", t0.Add(time.Second), "ping failed")}, "False", v1beta1.HealingReason, ""},
	} {
		fleet := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f", Generation: 1},
			Spec: v1beta1.LimiterFleetSpec{Store: v1beta1.Store{Type: v1beta1.StoreCluster}}}
		s := &redisScope{fleet: fleet, acks: tc.acks, redis: &redisfleet.Scope{Now: t0.Add(time.Minute), Result: tc.result, SettledAt: tc.settledAt}}
		computeRedisStatus(fleet, s, nil)
		c := meta.FindStatusCondition(fleet.Status.Conditions, v1beta1.RedisReadyCondition)
		if c == nil || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
			t.Errorf("%s: RedisReady %+v, want %s %s with %q", tc.name, c, tc.status, tc.reason, tc.message)
		}
	}
}
