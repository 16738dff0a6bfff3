package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leaderElectionID names the operator's leader election Lease.
const leaderElectionID = "operator.ratelimit.sluice.dev"

// inClusterNamespaceFile holds the pod's namespace: the Lease's when
// --leader-election-namespace names none.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// newLeaderLock is the operator's leader election Lease, as
// controller-runtime would make it (identity hostname_uuid), wrapped so
// that its release on SIGTERM survives a renewal cancelled in flight
// (releaseRetryLock).
func newLeaderLock(cfg *rest.Config, namespace string) (resourcelock.Interface, error) {
	if namespace == "" {
		b, err := os.ReadFile(inClusterNamespaceFile)
		if err != nil {
			return nil, fmt.Errorf("--leader-election-namespace is empty and the pod's namespace is unknown: %w", err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	rest.AddUserAgent(cfg, "leader-election")
	c, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, leaderElectionID, nil, c,
		resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())})
	if err != nil {
		return nil, err
	}
	return releaseRetryLock{lock}, nil
}

// releaseRetryLock retries the leader's release of its Lease once after a
// conflict. client-go's elector (v0.33) releases with an Update of the
// Lease as it last read it; when SIGTERM cancels a renewal in flight, the
// API server may still apply that renewal, so the release conflicts and
// the next leader waits out the whole lease (kubernetes/kubernetes#131867,
// fixed upstream in later client-go). The retry reads the Lease afresh and
// releases it only if this operator still holds it.
type releaseRetryLock struct {
	resourcelock.Interface
}

func (l releaseRetryLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, rec)
	if rec.HolderIdentity != "" || !apierrors.IsConflict(err) {
		return err
	}
	cur, _, getErr := l.Get(ctx) // refreshes the Lease the next Update writes over
	if getErr != nil {
		return errors.Join(err, getErr)
	}
	if cur.HolderIdentity != l.Identity() {
		return err // another holds it: nothing of ours to release
	}
	return l.Interface.Update(ctx, rec)
}
