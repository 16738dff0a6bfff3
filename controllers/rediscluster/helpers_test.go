package rediscluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/controllers/rediscluster"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// nodeTimeout is the cluster-node-timeout of the test clusters.
const nodeTimeout = 2 * time.Second

// fleet stands in for a LimiterFleet's Redis pods: one cluster-enabled
// redis-server per pod, each on its own address of the test process's
// loopback /24 (internal/testnet), port 6379, with its own data directory.
type fleet struct {
	t       *testing.T
	spec    rediscluster.Spec
	servers map[string]*redistest.Server // by pod
	dirs    map[string]string
	extra   []string
	tracker *rediscluster.Tracker
	// admin, when set, is the user the test's own clients authenticate as
	// (user, password): nodes with ACL users have no default user.
	admin [2]string
}

// ACL users of newACLFleet's nodes.
const (
	aclOperator, aclOperatorPW = "operator", "operator-pw"
	aclAdmin, aclAdminPW       = "admin", "admin-pw"
	aclLimiter, aclLimiterPW   = "limiter", "limiter-pw"
)

// newACLFleet is newFleet with the default user off and four users: the
// operator's, with OperatorACLRules, which the passes authenticate as;
// replication, with ReplicaACLRules, which replicas authenticate to their
// primary as; the limiters', with the store's ACLRules; and an admin for
// the test's own clients.
func newACLFleet(t *testing.T, ip, shards, replicas int, extra ...string) *fleet {
	t.Helper()
	acl := []string{
		"user default off resetpass -@all",
		"user " + aclOperator + " on >" + aclOperatorPW + " " + rediscluster.OperatorACLRules(),
		"user replication on >replication-pw " + rediscluster.ReplicaACLRules(),
		"user " + aclAdmin + " on >" + aclAdminPW + " ~* &* +@all",
		"user " + aclLimiter + " on >" + aclLimiterPW + " " + redisstore.ACLRules(""),
		"masteruser replication", "masterauth replication-pw",
	}
	return newFleetWith(t, ip, shards, replicas, func(f *fleet) {
		f.spec.Username, f.spec.Password = aclOperator, aclOperatorPW
		f.admin = [2]string{aclAdmin, aclAdminPW}
	}, append(acl, extra...)...)
}

// newFleet starts shards x (1+replicas) nodes on testnet.IP(ip), IP(ip+1), ...
func newFleet(t *testing.T, ip, shards, replicas int, extra ...string) *fleet {
	t.Helper()
	return newFleetWith(t, ip, shards, replicas, nil, extra...)
}

// newFleetWith is newFleet with setup run on the fleet before any node
// starts.
func newFleetWith(t *testing.T, ip, shards, replicas int, setup func(*fleet), extra ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, servers: map[string]*redistest.Server{}, dirs: map[string]string{}, extra: extra,
		tracker: rediscluster.NewTracker(),
		spec:    rediscluster.Spec{Shards: shards, ReplicasPerShard: replicas, NodeTimeout: nodeTimeout}}
	if setup != nil {
		setup(f)
	}
	for s := range shards {
		for o := range 1 + replicas {
			f.add(s, o, ip)
			ip++
		}
	}
	return f
}

// add starts pod <shard>-<ordinal> on testnet.IP(ip) with a new data dir.
func (f *fleet) add(shard, ordinal, ip int) {
	pod := fmt.Sprintf("redis-%d-%d", shard, ordinal)
	f.dirs[pod] = f.t.TempDir()
	f.spec.Members = append(f.spec.Members, rediscluster.Member{Pod: pod, Shard: shard, Ordinal: ordinal})
	f.start(pod, ip)
}

// start (re)starts pod on testnet.IP(ip) with its data dir.
func (f *fleet) start(pod string, ip int) {
	addr := testnet.Addr(ip, 6379)
	f.servers[pod] = redistest.StartNode(f.t, addr, f.dirs[pod], nodeTimeout, f.extra...)
	f.servers[pod].Username, f.servers[pod].Password = f.admin[0], f.admin[1]
	for i := range f.spec.Members {
		if f.spec.Members[i].Pod == pod {
			f.spec.Members[i].Addr = addr
		}
	}
}

// reconcile runs one pass.
func (f *fleet) reconcile(ctx context.Context, opts ...rediscluster.Option) (rediscluster.Result, error) {
	res, err := rediscluster.Reconcile(ctx, f.spec, append([]rediscluster.Option{rediscluster.WithTracker(f.tracker)}, opts...)...)
	f.spec.Migration = res.Migration // what the fleet controller persists in status
	return res, err
}

// reconcileUntil runs passes, as the fleet controller does on requeue,
// until done says so, failing after within. It returns the last Result and
// every action sent.
func (f *fleet) reconcileUntil(within time.Duration, done func(rediscluster.Result, error) bool, opts ...rediscluster.Option) (rediscluster.Result, []string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var actions []string
	for {
		res, err := f.reconcile(context.Background(), opts...)
		actions = append(actions, res.Actions...)
		if done(res, err) {
			return res, actions
		}
		if ctx.Err() != nil {
			f.t.Fatalf("not done within %v: last error %v\nresult %+v\nactions %s", within, err, res, strings.Join(actions, "\n"))
		}
		wait := res.RequeueAfter
		if wait == 0 {
			wait = 200 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait): // the controller's requeue
		}
	}
}

func converged(res rediscluster.Result, err error) bool { return err == nil && res.Converged }

// client is a cluster client seeded with the fleet's current addresses of
// running nodes, authenticated as the admin when the fleet has one, else
// with password.
func (f *fleet) client(password string) *goredis.ClusterClient {
	username := ""
	if f.admin[0] != "" {
		username, password = f.admin[0], f.admin[1]
	}
	var addrs []string
	for _, m := range f.spec.Members {
		if f.servers[m.Pod].Running() {
			addrs = append(addrs, m.Addr)
		}
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, Username: username, Password: password, MaxRedirects: 16,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	f.t.Cleanup(func() { _ = c.Close() })
	return c
}

// writeKeys sets n keys <prefix>:<i> = <i> through a new cluster client.
func (f *fleet) writeKeys(prefix string, n int) {
	t := f.t
	t.Helper()
	c := f.client(f.spec.Password)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for lo := 0; lo < n; lo += 500 {
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := lo; i < min(lo+500, n); i++ {
				p.Set(ctx, fmt.Sprintf("%s:%d", prefix, i), i, 0)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("write keys: %v", err)
		}
	}
	f.waitWritten()
	f.waitReplicated()
}

// waitReplicated waits until every running replica has every write of its
// running primary. The tests that kill primaries after writeKeys test the
// passes, not Redis's asynchronous replication, which loses what a replica
// had not received (once, on a busy machine, a replica still in its first
// sync lost every key of its shard when its primary was killed).
func (f *fleet) waitReplicated() {
	t := f.t
	t.Helper()
	byAddr := map[string]*redistest.Server{}
	for _, s := range f.servers {
		byAddr[s.Addr] = s
	}
	deadline := time.Now().Add(2 * time.Minute)
	for pod, s := range f.servers {
		for s.Running() {
			replica := replicationInfo(s)
			if replica["role"] != "slave" {
				break
			}
			primary := byAddr[replica["master_host"]+":"+replica["master_port"]]
			if primary == nil || !primary.Running() {
				break // nothing to catch up with
			}
			want := replicationInfo(primary)["master_repl_offset"]
			if replica["master_link_status"] == "up" && replica["master_sync_in_progress"] == "0" && atLeast(replica["slave_repl_offset"], want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s has not caught up with its primary %s within 2m: %v (primary at offset %s)", pod, primary.Addr, replica, want)
			}
			time.Sleep(50 * time.Millisecond) // polling Redis's replication
		}
	}
}

// replicationInfo is s's INFO replication, field by field (empty when s
// does not answer).
func replicationInfo(s *redistest.Server) map[string]string {
	v, _ := s.Do("INFO", "replication")
	info, _ := v.(string)
	out := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, val, ok := strings.Cut(line, ":"); ok {
			out[k] = val
		}
	}
	return out
}

// atLeast reports that offset a is at least offset b, both decimal.
func atLeast(a, b string) bool {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	return errA == nil && errB == nil && x >= y
}

// waitWritten waits until every running node has written its append-only
// buffer to its file: with appendfsync everysec, Redis holds writes back
// while an fsync is slow (a busy disk, another test run beside this one),
// and a node killed meanwhile (as a deleted pod) comes back without them.
func (f *fleet) waitWritten() {
	t := f.t
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for pod, s := range f.servers {
		for s.Running() {
			v, err := s.Do("INFO", "persistence")
			info, _ := v.(string)
			if err == nil && strings.Contains(info, "aof_buffer_length:0\r\n") && strings.Contains(info, "aof_pending_bio_fsync:0\r\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has not written its append-only file within 2m: %v\n%s", pod, err, info)
			}
			time.Sleep(50 * time.Millisecond) // polling Redis's background writes
		}
	}
}

// checkKeys fails unless every key writeKeys set is there, read through a
// new cluster client that knows the current map.
func (f *fleet) checkKeys(prefix string, n int) {
	t := f.t
	t.Helper()
	c := f.client(f.spec.Password)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmds, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range n {
			p.Get(ctx, fmt.Sprintf("%s:%d", prefix, i))
		}
		return nil
	})
	missing := 0
	for i, cmd := range cmds {
		if v, err := cmd.(*goredis.StringCmd).Int(); err != nil || v != i {
			missing++
			if missing < 5 {
				t.Errorf("%s:%d = %v, %v", prefix, i, v, err)
			}
		}
	}
	if missing > 0 || (err != nil && err != goredis.Nil) {
		t.Fatalf("%d of %d keys missing or wrong (%v)", missing, n, err)
	}
}

// slotsPerPrimary is the slots each primary serves, by pod.
func slotsPerPrimary(res rediscluster.Result) map[string]int {
	m := map[string]int{}
	for _, p := range res.Status.Primaries {
		m[p.Pod] = p.Slots
	}
	return m
}

// requireRejoinedAsReplica fails the test if pod, a master restarted with
// its disk after its replica was promoted, serves slots without having
// rejoined as a replica first: it would serve its stale claim beside the
// promoted one. Serving them after an election it won as a replica is
// Redis's own failover (the promoted master stalled past the node timeout,
// as a busy machine does), not a stale claim.
func (f *fleet) requireRejoinedAsReplica(res rediscluster.Result, pod string) {
	f.t.Helper()
	if slotsPerPrimary(res)[pod] == 0 {
		return
	}
	log := f.servers[pod].Log()
	demoted := strings.Index(log, "Reconfiguring myself as a replica")
	won := strings.LastIndex(log, "Failover election won")
	if demoted < 0 || won < demoted {
		f.t.Errorf("%s came back as a master without rejoining as a replica: %+v\nits log:\n%s", pod, res.Status.Primaries, log)
	}
}

// requireNoDenials fails the test if a running node refused any user a
// command or key since it started (ACL LOG): the users' rules cover what
// the operator, replicas and limiters send.
func (f *fleet) requireNoDenials() {
	t := f.t
	t.Helper()
	for pod, srv := range f.servers {
		if !srv.Running() {
			continue
		}
		v, err := srv.Client(t).Do(context.Background(), "ACL", "LOG").Slice()
		if err != nil {
			t.Fatalf("ACL LOG on %s: %v", pod, err)
		}
		for _, e := range v {
			t.Errorf("%s refused: %v", pod, e)
		}
	}
}
