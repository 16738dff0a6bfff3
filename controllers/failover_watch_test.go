package controllers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
)

// TestStandbyFailsOverWithTheLeaderGone is a Kubernetes node lost with
// every Redis master of a fleet and the operator's leader: the masters
// stall (SIGSTOP: connections hang, nothing answers), the leader is gone
// (the suite's operator stopped), and the other operator pod does not lead
// (another holds the Lease for the whole test). No majority is left to
// elect a replica, so only a TAKEOVER brings the slots back: the standby's
// failover watch sends it, about a node timeout after, instead of the
// cluster waiting for the Lease to expire and a new leader to start.
func TestStandbyFailsOverWithTheLeaderGone(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	rf := newRedisFleet(t, "redis-standby", "standby", 3, 1)
	f := rf.waitRedisReady(t, 60*time.Second, metav1.ConditionTrue, v1beta1.ClusterOKReason)
	before := &v1beta1.LimiterFleet{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(f), before); err != nil {
		t.Fatal(err)
	}
	startStandby(t, "sluice-standby-test")
	stopOperator()
	t.Cleanup(func() {
		if err := startOperator(); err != nil {
			t.Errorf("restarting the operator: %v", err)
		}
	})

	stalled := time.Now()
	heirs := map[int32]string{}
	for _, r := range f.Status.Redis.Replicas {
		heirs[r.Shard] = r.Pod
	}
	for _, p := range f.Status.Redis.Primaries {
		rf.pod(t, p.Pod).srv.Pause(t)
	}
	eventually(t, 60*time.Second, "every replica a master and every live node ok, from the standby alone", func() error {
		for shard, heir := range heirs {
			role, err := rf.pod(t, heir).srv.Client(t).Do(ctx, "ROLE").Slice()
			if err != nil || len(role) == 0 || role[0] != "master" {
				return fmt.Errorf("shard %d: %s ROLE %v %v", shard, heir, role, err)
			}
		}
		return rf.liveClusterOK(t)
	})
	t.Logf("every master stalled and the leader gone (node timeout %v): the standby's takeovers had every slot served, cluster_state ok, after %v",
		f.Spec.EffectiveNodeTimeout(), time.Since(stalled).Round(time.Millisecond))
	// With no leader, the standby tells the failover in RedisReady: each
	// lost primary and the replica that serves its slots.
	eventually(t, 30*time.Second, "RedisReady FailedOver, written by the standby, naming every heir", func() error {
		c := condition(rf.get(t).Status.Conditions, v1beta1.RedisReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.FailedOverReason || !strings.HasSuffix(c.Message, redisfleet.StandbyNote) {
			return fmt.Errorf("RedisReady %+v", c)
		}
		for shard, heir := range heirs {
			if !strings.Contains(c.Message, fmt.Sprintf("shard %d: primary ", shard)) || !strings.Contains(c.Message, heir+" serves its slots") {
				return fmt.Errorf("shard %d's heir %s not told: %s", shard, heir, c.Message)
			}
		}
		t.Logf("RedisReady %.1fs after the stall, from the standby: %s: %s", time.Since(stalled).Seconds(), c.Reason, c.Message)
		return nil
	})
	// It wrote as the Redis writer, whose condition RedisReady is: no
	// other manager's status entry is left for the leader to hand over.
	latest := rf.get(t)
	for _, e := range latest.ManagedFields {
		if e.Subresource == "status" && e.Operation != metav1.ManagedFieldsOperationApply {
			t.Errorf("a status entry of manager %q by %s after the standby's write: want only applies", e.Manager, e.Operation)
		}
		if e.Subresource == "status" && e.Manager != controllers.RedisStatusFieldOwner && e.FieldsV1 != nil &&
			strings.Contains(string(e.FieldsV1.Raw), `"type":"RedisReady"`) {
			t.Errorf("RedisReady owned by %q too, want %q alone", e.Manager, controllers.RedisStatusFieldOwner)
		}
	}
	// And at the resourceVersion it read: a status written since is not
	// overwritten (before was read before the stall).
	mine := controllers.OwnedFleetStatus(&before.Status, controllers.RedisStatusFieldOwner)
	if err := controllers.ApplyFleetStatusAt(ctx, k8s, before, controllers.RedisStatusFieldOwner, mine, before.ResourceVersion); !apierrors.IsConflict(err) {
		t.Errorf("an apply at resourceVersion %s, before the standby's write: %v, want a conflict", before.ResourceVersion, err)
	}
	for _, p := range f.Status.Redis.Primaries {
		rf.pod(t, p.Pod).srv.Resume(t)
	}
}

// startStandby runs a second operator in-process that never leads:
// another identity holds its Lease for longer than any test.
func startStandby(t *testing.T, leaseName string) {
	t.Helper()
	ns := "default"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("elsewhere"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if err := k8s.Create(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), lease) })
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		Cache:                   cache.Options{ByObject: controllers.CacheByObject()},
		Controller:              ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		LeaderElection:          true,
		LeaderElectionID:        leaseName,
		LeaderElectionNamespace: ns,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts := controllers.Options{LimiterImage: "sluice-limiter:test", AckClient: podNetwork.client(), AdminTokenFile: operatorTokenFile}
	if err := controllers.Setup(ctx, mgr, opts); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "standby operator stopped:", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
