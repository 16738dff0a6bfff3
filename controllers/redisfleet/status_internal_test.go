package redisfleet

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/rediscluster"
)

// TestRedisReadyTellsTheFailover: while a lost primary's slots wait for a
// replica, RedisReady names it and since when it is silent; once its
// replica serves them, the reason is FailedOver and the message says when
// and how, though the lost node still does not answer.
func TestRedisReadyTellsTheFailover(t *testing.T) {
	heard := time.Date(2026, 12, 7, 1, 2, 3, 400e6, time.UTC)
	unreachable := &rediscluster.NodeError{Pod: "f-redis-1-0", Addr: "10.0.0.5:6379", Reason: rediscluster.ReasonUnreachable, Err: errors.New("i/o timeout")}
	lost := rediscluster.LostPrimary{Pod: "f-redis-1-0", Shard: 1, NodeID: "abc", LastHeard: heard}

	waiting := &Scope{Now: heard.Add(1500 * time.Millisecond), Err: unreachable, Result: rediscluster.Result{Status: rediscluster.Status{
		ClusterState: "fail", SlotsAssigned: rediscluster.SlotCount, Lost: []rediscluster.LostPrimary{lost}}}}
	_, status, reason, msg := Status(nil, waiting)
	if status != metav1.ConditionFalse || reason != v1beta1.NodeUnreachableReason ||
		!strings.HasPrefix(msg, "shard 1: primary f-redis-1-0 lost (last heard from at 01:02:03.400Z, 1.5s ago), no replica serves its slots yet; ") {
		t.Errorf("waiting for the failover: %s %s %q", status, reason, msg)
	}

	lost.Heir, lost.HeirSince, lost.By = "f-redis-1-1", heard.Add(2200*time.Millisecond), "TAKEOVER"
	served := &Scope{Now: heard.Add(3 * time.Second), Err: unreachable, Result: rediscluster.Result{Status: rediscluster.Status{
		ClusterState: "ok", SlotsAssigned: rediscluster.SlotCount, Lost: []rediscluster.LostPrimary{lost}}}}
	_, status, reason, msg = Status(nil, served)
	want := "shard 1: primary f-redis-1-0 lost (last heard from at 01:02:03.400Z), f-redis-1-1 serves its slots (seen at 01:02:05.600Z, 2.2s after), after the operator's CLUSTER FAILOVER TAKEOVER; "
	if status != metav1.ConditionFalse || reason != v1beta1.FailedOverReason || !strings.HasPrefix(msg, want) || !strings.Contains(msg, "i/o timeout") {
		t.Errorf("failed over: %s %s %q, want FailedOver and a message starting %q", status, reason, msg, want)
	}

	lost.By = ""
	served.Result.Status.Lost = []rediscluster.LostPrimary{lost}
	if _, _, _, msg = Status(nil, served); !strings.Contains(msg, "(seen at 01:02:05.600Z, 2.2s after), promoted by Redis's election;") {
		t.Errorf("an election's failover: %q", msg)
	}
}
