package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// A deleted operator must hand its Lease over, or the next one waits out
// the lease (15s) with nobody reconciling. The journey once saw exactly
// that: SIGTERM cancelled a renewal in flight, the API server applied it
// anyway, and the release (an Update of the Lease as last read) conflicted.
// Here, against a real API server, the renewal lands behind the lock's
// back: client-go's own release conflicts, the operator's lock releases.
// A Lease someone else took meanwhile is left alone.
func TestLeaderReleaseAfterRenewalAppliedBehindItsBack(t *testing.T) {
	env := &envtest.Environment{BinaryAssetsDirectory: filepath.Join("..", "..", "bin", "k8s")}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	const ns = "default"

	lock, err := newLeaderLock(cfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	me := lock.Identity()
	now := metav1.NewTime(time.Now())
	held := resourcelock.LeaderElectionRecord{HolderIdentity: me, LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
	release := resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now}
	// renewBehind changes the Lease as a renewal the client gave up on
	// would: same holder (or another), newer renewTime, new resourceVersion.
	renewBehind := func(holder string) {
		t.Helper()
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, leaderElectionID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Spec.HolderIdentity = ptr.To(holder)
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if _, err := cs.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	holder := func() string {
		t.Helper()
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, leaderElectionID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}

	if err := lock.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	renewBehind(me)
	// client-go's lock alone: the release conflicts, the Lease stays held.
	if err := lock.(releaseRetryLock).Interface.Update(ctx, release); !apierrors.IsConflict(err) {
		t.Fatalf("client-go's release after a renewal behind its back: %v, want a conflict (the race this lock mends)", err)
	}
	if h := holder(); h != me {
		t.Fatalf("holder %q after the failed release, want %q", h, me)
	}
	// The operator's lock: released.
	if err := lock.Update(ctx, release); err != nil {
		t.Fatalf("release: %v", err)
	}
	if h := holder(); h != "" {
		t.Fatalf("holder %q after the release, want none", h)
	}

	// Another operator took the Lease: the release fails and leaves it.
	if err := lock.Update(ctx, held); err != nil {
		t.Fatal(err)
	}
	renewBehind("other-operator")
	if err := lock.Update(ctx, release); !apierrors.IsConflict(err) {
		t.Fatalf("release of a Lease another holds: %v, want the conflict", err)
	}
	if h := holder(); h != "other-operator" {
		t.Fatalf("holder %q after releasing a Lease another holds, want other-operator", h)
	}
}
