package rediscluster_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
)

// listen serves addr with handle for every connection until the test ends.
func listen(t *testing.T, addr string, handle func(net.Conn)) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// nodeErrors maps pod to the reason of each *NodeError err joins.
func nodeErrors(err error) map[string]*rediscluster.NodeError {
	out := map[string]*rediscluster.NodeError{}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	for _, e := range errs {
		var ne *rediscluster.NodeError
		if errors.As(e, &ne) {
			out[ne.Pod] = ne
		}
	}
	return out
}

// TestBadNodes: members that answer junk, never answer, refuse AUTH, want
// AUTH, or run without cluster support each give a NodeError naming the
// pod and the reason, within the command timeout, and the pass still
// reports the rest.
func TestBadNodes(t *testing.T) {
	listen(t, testnet.Addr(180, 6379), func(c net.Conn) { // an HTTP server where Redis should be
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		}
	})
	listen(t, testnet.Addr(181, 6379), func(c net.Conn) { // accepts and never answers
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
	listen(t, testnet.Addr(186, 6379), func(c net.Conn) { // answers a RESP string that is no CLUSTER NODES
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			_, _ = c.Write([]byte("+PONG\r\n"))
		}
	})
	redistest.StartNode(t, testnet.Addr(182, 6379), t.TempDir(), nodeTimeout, "requirepass right")
	redistest.StartAt(t, testnet.Addr(184, 6379)) // cluster support disabled
	spec := rediscluster.Spec{Shards: 3, Password: "wrong", Members: []rediscluster.Member{
		{Pod: "junk", Shard: 0, Addr: testnet.Addr(180, 6379)},
		{Pod: "silent", Shard: 1, Addr: testnet.Addr(181, 6379)},
		{Pod: "wrongpass", Shard: 2, Addr: testnet.Addr(182, 6379)},
		{Pod: "nothing", Shard: 0, Ordinal: 1, Addr: testnet.Addr(183, 6379)},
		{Pod: "standalone", Shard: 1, Ordinal: 1, Addr: testnet.Addr(184, 6379)},
		{Pod: "noip", Shard: 2, Ordinal: 1},
		{Pod: "pongs", Shard: 0, Ordinal: 2, Addr: testnet.Addr(186, 6379)},
	}}
	start := time.Now()
	res, err := rediscluster.Reconcile(context.Background(), spec, rediscluster.WithTimeout(500*time.Millisecond))
	took := time.Since(start)
	if took > 10*time.Second {
		t.Errorf("the pass took %v", took)
	}
	got := nodeErrors(err)
	for pod, reason := range map[string]string{
		"junk": rediscluster.ReasonGarbage, "silent": rediscluster.ReasonUnreachable,
		"wrongpass": rediscluster.ReasonAuthFailed, "nothing": rediscluster.ReasonUnreachable,
		"standalone": rediscluster.ReasonNotClusterNode, "noip": rediscluster.ReasonUnreachable,
		"pongs": rediscluster.ReasonGarbage,
	} {
		ne := got[pod]
		if ne == nil || ne.Reason != reason || !strings.Contains(ne.Error(), pod) {
			t.Errorf("%s: got %v, want reason %s", pod, ne, reason)
			continue
		}
		t.Logf("%s: %v", pod, ne)
	}
	if res.Converged || len(res.Status.Unreachable) != 7 || res.Status.Operation != rediscluster.OperationWaiting {
		t.Errorf("status %+v", res.Status)
	}

	// Two pods started from one copied volume share a node ID.
	dir := t.TempDir()
	redistest.StartNode(t, testnet.Addr(187, 6379), dir, nodeTimeout).Stop()
	copyDir := t.TempDir()
	conf, err := os.ReadFile(filepath.Join(dir, "nodes.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copyDir, "nodes.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	redistest.StartNode(t, testnet.Addr(187, 6379), dir, nodeTimeout)
	redistest.StartNode(t, testnet.Addr(188, 6379), copyDir, nodeTimeout)
	spec = rediscluster.Spec{Shards: 3, Members: []rediscluster.Member{
		{Pod: "original", Addr: testnet.Addr(187, 6379)}, {Pod: "copy", Shard: 1, Addr: testnet.Addr(188, 6379)}}}
	res, err = rediscluster.Reconcile(context.Background(), spec)
	if ne := nodeErrors(err)["copy"]; ne == nil || ne.Reason != rediscluster.ReasonDuplicateID || !strings.Contains(ne.Error(), "also pod original's") {
		t.Errorf("copy: %v", err)
	}
	if len(res.Actions) != 0 {
		t.Errorf("acted on a cluster with a duplicate node ID: %v", res.Actions)
	}

	// No password at all against a node that wants one.
	spec = rediscluster.Spec{Shards: 3, Members: []rediscluster.Member{{Pod: "noauth", Addr: testnet.Addr(182, 6379)}}}
	_, err = rediscluster.Reconcile(context.Background(), spec)
	if ne := nodeErrors(err)["noauth"]; ne == nil || ne.Reason != rediscluster.ReasonAuthFailed {
		t.Errorf("noauth: %v", err)
	}
}

// TestBadSpec: a spec that cannot describe a cluster is refused before any
// node is contacted, naming what is wrong.
func TestBadSpec(t *testing.T) {
	m := func(pod string, shard, ord int, addr string) rediscluster.Member {
		return rediscluster.Member{Pod: pod, Shard: shard, Ordinal: ord, Addr: addr}
	}
	for _, tc := range []struct {
		spec rediscluster.Spec
		want string
	}{
		{rediscluster.Spec{Shards: 2}, "shards is 2, a Redis Cluster needs at least 3"},
		{rediscluster.Spec{Shards: 3, ReplicasPerShard: -1}, "replicasPerShard is -1"},
		{rediscluster.Spec{Shards: 3, Members: []rediscluster.Member{m("a", 0, 0, "10.0.0.1:6379"), m("b", 1, 0, "10.0.0.1:6379")}},
			"pods a and b have the same address 10.0.0.1:6379"},
		{rediscluster.Spec{Shards: 3, Members: []rediscluster.Member{m("a", 0, 0, ""), m("b", 0, 0, "")}},
			"pods a and b are both ordinal 0 of shard 0"},
		{rediscluster.Spec{Shards: 3, Members: []rediscluster.Member{m("a", 0, 0, "10.0.0.1")}}, `pod a has address "10.0.0.1"`},
		{rediscluster.Spec{Shards: 3, Members: []rediscluster.Member{m("a", -1, 0, "")}}, "pod a has shard -1"},
		{rediscluster.Spec{Shards: 3, Migration: &rediscluster.Migration{Moves: []rediscluster.SlotMove{{First: 10, Last: 20000, FromShard: 0, ToShard: 1}}}},
			"is not a move of slots between shards 0..2"},
	} {
		_, err := rediscluster.Reconcile(context.Background(), tc.spec)
		var se *rediscluster.SpecError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want a SpecError with %q", tc.spec, err, tc.want)
		}
	}
}

// TestShardLost: a shard without replicas whose only pod comes back empty
// on a new IP has provably lost its keys: the passes forget the dead node
// ID, give its slots to the new pod, and say so in DataLoss.
func TestShardLost(t *testing.T) {
	f := newFleet(t, 170, 3, 0)
	f.reconcileUntil(30*time.Second, converged)
	f.writeKeys("lost", 3000)
	f.servers["redis-1-0"].Stop()
	f.dirs["redis-1-0"] = t.TempDir()
	f.start("redis-1-0", 173)
	var loss string
	res, actions := f.reconcileUntil(60*time.Second, func(res rediscluster.Result, err error) bool {
		if res.DataLoss != "" {
			loss = res.DataLoss
		}
		return converged(res, err)
	})
	t.Logf("data loss reported: %s; actions %v", loss, actions)
	if !strings.Contains(loss, "5461-10921") || !hasAction(actions, "CLUSTER FORGET") || !hasAction(actions, "redis-1-0: CLUSTER ADDSLOTSRANGE 5461 10921") {
		t.Fatalf("DataLoss %q, actions %v", loss, actions)
	}
	if got := slotsPerPrimary(res)["redis-1-0"]; got != 5461 {
		t.Fatalf("redis-1-0 serves %d slots", got)
	}
}
