package controllers_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// TestFleetStatusRegions: a fleet in region a, with one peer b, shows in
// status.regions and the RegionsReachable condition what its real limiter
// pods see of b, as b's configuration goes from bad to good: nothing
// listening (PeerUnreachable), a token b refuses (PeerUnauthorized), a b
// whose peers don't include a (PeerUnknownRegion), and a b that grants
// (PeersReachable, with the grants held). Each bad state names the peer.
// A fleet that leaves its regions loses both.
func TestFleetStatusRegions(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	dir := t.TempDir()
	token := func(name, value string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Repeat(value, 40)), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	aAuth, aForB, bOwn, cTok := token("a.token", "a"), token("a-for-b.token", "x"), token("b.token", "b"), token("c.token", "c")

	srvA, srvB := redistest.Start(t), redistest.Start(t)
	ns := namespace(t, "regions-status")
	bIP := fmt.Sprintf("127.0.%d.9", 100+ipBlock.Add(1))
	bPeer := net.JoinHostPort(bIP, strconv.Itoa(freePort(t, bIP)))

	// Created as v1beta1, the version that says regions and scopes.
	bs := newScheme()
	if err := v1beta1.AddToScheme(bs); err != nil {
		t.Fatal(err)
	}
	beta, err := client.New(cfg, client.Options{Scheme: bs})
	if err != nil {
		t.Fatal(err)
	}
	bFleet := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rg"}}
	bFleet.Spec.Limiters.Replicas = ptr.To(int32(1))
	bFleet.Spec.Policies = &v1beta1.PolicySelection{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "rg"}}}
	bFleet.Spec.Store.Type = v1beta1.StoreExternal
	bFleet.Spec.Store.External = &v1beta1.ExternalStore{Addresses: []string{srvA.Addr}}
	// The insecure lab's bearer tokens: each wrong token is one setting.
	bFleet.Spec.Regions = &v1beta1.FleetRegions{Name: "a", InsecureLab: ptr.To(true), Auth: &v1beta1.SecretKeyRef{SecretName: "a-token", Key: "token"},
		Peers: []v1beta1.RegionPeer{{Name: "b", Endpoint: "http://" + bPeer, Credentials: &v1beta1.SecretKeyRef{SecretName: "b-token", Key: "token"}}}}
	if err := beta.Create(ctx, bFleet); err != nil {
		t.Fatal(err)
	}
	fleet := &v1alpha1.LimiterFleet{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(bFleet), fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })

	pol := statsPolicy(ns, "per-user", "rg", "regions-api", 1000, false)
	bPol := &v1beta1.RateLimitPolicy{}
	if err := pol.ConvertTo(bPol); err != nil {
		t.Fatal(err)
	}
	bPol.Spec.Limit.Rate.Scope = ptr.To(v1beta1.ScopeGlobal)
	bPol.TypeMeta = metav1.TypeMeta{}
	if err := beta.Create(ctx, bPol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = beta.Delete(ctx, bPol) })

	// The fleet's limiters, with the flags its Deployment renders and the
	// tokens as files (envtest mounts no Secret).
	aPeer := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
	pods := fleetPodsWithArgs(t, fleet, 1, "redis://"+srvA.Addr, "--redis-timeout=2s",
		"--region", "a", "--peer-insecure-lab", "--region-token-file", aAuth, "--peer-addr", aPeer,
		"--peer", "b=http://"+bPeer, "--peer-token-file", "b="+aForB, "--peer-timeout", "10s")
	waitPolicy(t, ns, pol.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)

	// Region b: a limiter of its own, with the same Global policy.
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(`apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: `+ns+`}
spec:
  domain: regions-api
  descriptors: [{key: user}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 1000, period: 1h, scope: Global}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	bHTTP := net.JoinHostPort(bIP, strconv.Itoa(freePort(t, bIP)))
	bGRPC := net.JoinHostPort(bIP, strconv.Itoa(freePort(t, bIP)))
	bAdmin := net.JoinHostPort(bIP, strconv.Itoa(freePort(t, bIP)))
	var b *limiterProc
	startB := func(auth string, peers ...string) {
		t.Helper()
		if b != nil {
			b.stop()
		}
		b = &limiterProc{ip: bIP, httpAddr: bHTTP}
		b.args = append([]string{"--policies", policies, "--store", "redis://" + srvB.Addr, "--redis-timeout=2s",
			"--http-addr", bHTTP, "--grpc-addr", bGRPC, "--admin-addr", bAdmin,
			"--region", "b", "--peer-insecure-lab", "--region-token-file", auth, "--peer-addr", bPeer}, peers...)
		b.start(t)
	}
	t.Cleanup(func() {
		if b != nil {
			b.stop()
		}
	})

	// want waits, sending a's limiter checks on keys of which some are
	// homed at b (a region calls a key's home only for traffic on it),
	// until the fleet's RegionsReachable is status/reason and its message
	// and status.regions' b entry say what ok checks.
	want := func(status metav1.ConditionStatus, reason, peerReason string, ok func(v1alpha1.RegionStatus) error) {
		t.Helper()
		eventually(t, 2*time.Minute, "RegionsReachable "+reason, func() error {
			for i := range 20 {
				pods[0].check(t, "regions-api", "user", "u"+strconv.Itoa(i))
			}
			f := &v1alpha1.LimiterFleet{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
				return err
			}
			c := meta.FindStatusCondition(f.Status.Conditions, v1beta1.RegionsReachableCondition)
			if c == nil {
				return fmt.Errorf("no RegionsReachable condition; status.regions %+v", f.Status.Regions)
			}
			if c.Status != status || c.Reason != reason {
				return fmt.Errorf("RegionsReachable %s/%s %q, want %s/%s", c.Status, c.Reason, c.Message, status, reason)
			}
			if status == metav1.ConditionFalse && !strings.Contains(c.Message, "peer b "+peerReason) {
				return fmt.Errorf("RegionsReachable message %q names no peer b %s", c.Message, peerReason)
			}
			if len(f.Status.Regions) != 1 || f.Status.Regions[0].Name != "b" {
				return fmt.Errorf("status.regions %+v, want b alone", f.Status.Regions)
			}
			r := f.Status.Regions[0]
			if r.Reason != peerReason || r.Pods != 1 || r.Since == nil {
				return fmt.Errorf("status.regions b: %+v, want reason %s from 1 pod, with since", r, peerReason)
			}
			if ok != nil {
				return ok(r)
			}
			return nil
		})
	}

	// Nothing listens at b's endpoint.
	want(metav1.ConditionFalse, v1beta1.PeerUnreachableReason, "Unreachable", func(r v1alpha1.RegionStatus) error {
		if r.Reachable || !strings.Contains(r.Message, pods[0].podIP) {
			return fmt.Errorf("b %+v: want unreachable, the message naming pod %s", r, pods[0].podIP)
		}
		return nil
	})
	// b expects another token than a presents.
	startB(bOwn, "--peer", "a=http://"+aPeer, "--peer-token-file", "a="+aAuth)
	want(metav1.ConditionFalse, v1beta1.PeerUnauthorizedReason, "Unauthorized", nil)
	// b takes a's token, but lists only c among its peers.
	startB(aForB, "--peer", "c=http://127.0.0.1:1", "--peer-token-file", "c="+cTok)
	want(metav1.ConditionFalse, v1beta1.PeerUnknownRegionReason, "UnknownRegion", nil)
	// b lists a: grants flow, and a's pod holds some.
	startB(aForB, "--peer", "a=http://"+aPeer, "--peer-token-file", "a="+aAuth)
	want(metav1.ConditionTrue, v1beta1.PeersReachableReason, "Reachable", func(r v1alpha1.RegionStatus) error {
		if !r.Reachable || r.LastExchange == nil || r.Keys == 0 {
			return fmt.Errorf("b %+v: want reachable, a last exchange and keys tracked", r)
		}
		return nil
	})

	// The fleet leaves its regions: both are gone from its status.
	eventually(t, 2*time.Minute, "spec.regions removed", func() error {
		f := &v1beta1.LimiterFleet{}
		if err := beta.Get(ctx, client.ObjectKeyFromObject(bFleet), f); err != nil {
			return err
		}
		f.Spec.Regions = nil
		return beta.Update(ctx, f)
	})
	eventually(t, 2*time.Minute, "status.regions and RegionsReachable gone", func() error {
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(f.Status.Conditions, v1beta1.RegionsReachableCondition); c != nil || f.Status.Regions != nil {
			return fmt.Errorf("RegionsReachable %+v, status.regions %+v", c, f.Status.Regions)
		}
		return nil
	})
}
