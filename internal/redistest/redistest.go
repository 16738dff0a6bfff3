// Package redistest starts real redis-server processes on loopback for
// tests: a standalone server, or a Redis Cluster formed from Go (primaries,
// optionally with replicas and TCP proxies in front), and injects faults:
// kill, pause (SIGSTOP), restart, and latency or cuts through a Proxy.
//
// Servers listen on host 1 of the test process's loopback /24
// (internal/testnet), Host(), on ports the kernel had free: another test
// process, of this run or of another run beside it, never binds there.
//
// The binary is $REDIS_SERVER, or redis-server on PATH (`make test`
// installs it). Tests fail, not skip, when it is missing: a skipped store
// test proves nothing. Under -short (the unit tier, see internal/testtier)
// every helper that starts a server skips the test instead.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/testnet"
	"github.com/sluice-dev/sluice/internal/testtier"
)

// Server is one running redis-server.
type Server struct {
	Addr string
	Dir  string
	// Username and Password, when set, authenticate the helpers' own
	// clients (Client, and the checks of a Cluster): set them on a server
	// whose configuration turns the default user off.
	Username, Password string
	cmd                *exec.Cmd
	conf               string // the configuration file it runs with
	mu                 sync.Mutex
	// paused is true between Pause and Resume.
	paused bool
}

// Binary returns the redis-server to run, failing the test when none is found.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found: install it (make test does: hack/install-deps.sh) or set REDIS_SERVER")
	}
	return p
}

// Host is the loopback address the helpers start servers on: host 1 of the
// process's own /24 (testnet.IP(1)).
func Host() string { return testnet.IP(1) }

// FreeAddr returns a free TCP address on ip (e.g. Host()).
func FreeAddr(t testing.TB, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	defer l.Close()
	return l.Addr().String()
}

// freeClusterAddr is FreeAddr for a cluster node on Host(): its cluster
// bus port, the port + 10000, is free too.
func freeClusterAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := FreeAddr(t, Host())
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if p+10000 > 65535 {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort(Host(), strconv.Itoa(p+10000))); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatalf("no free port pair for a cluster node on %s", Host())
	return ""
}

// Start runs a standalone redis-server on a free port of Host(), stopped
// when the test ends. Extra config directives may be given as "name value".
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartAt(t, FreeAddr(t, Host()), extra...)
}

// StartAt runs redis-server on addr (host:port).
func StartAt(t testing.TB, addr string, extra ...string) *Server {
	t.Helper()
	return startIn(t, addr, t.TempDir(), extra...)
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.cmd = exec.Command(Binary(t), s.conf)
	if err := s.cmd.Start(); err != nil {
		s.mu.Unlock()
		t.Fatalf("start redis-server: %v", err)
	}
	s.mu.Unlock()
	if err := waitPing(s.Addr, 30*time.Second); err != nil {
		t.Fatalf("redis-server on %s did not answer: %v\n%s", s.Addr, err, s.Log())
	}
}

// Log returns the server's log file.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// Stop kills the server (SIGKILL: no goodbye to its clients or its
// cluster).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server must die too
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
	s.paused = false
}

// Running reports whether the process runs and is not paused.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && !s.paused
}

// Pid is the process id, or 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Pause stops the process with SIGSTOP, as a stalled node: connections stay
// open and nothing answers.
func (s *Server) Pause(t testing.TB) { s.signal(t, syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(t testing.TB) { s.signal(t, syscall.SIGCONT, false) }

func (s *Server) signal(t testing.TB, sig syscall.Signal, paused bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("redis-server on %s is not running", s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal redis-server: %v", err)
	}
	s.paused = paused
}

// Restart stops the server and starts it again with the same settings.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Client returns a client for this server, closed when the test ends. It
// authenticates as Username and Password when they are set.
func (s *Server) Client(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr, Username: s.Username, Password: s.Password,
		MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do runs one command on s with a deadline, on a connection of its own:
// for a test's post-mortem, which must not fail the test again.
func (s *Server) Do(args ...any) (any, error) { return s.do(args...) }

// do runs one command on s with a deadline, on a connection of its own.
func (s *Server) do(args ...any) (any, error) {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr, Username: s.Username, Password: s.Password,
		MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

func waitPing(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("PING\r\n"))
			if err == nil {
				var line string
				line, err = bufio.NewReader(c).ReadString('\n')
				if err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH")) { // up, maybe with requirepass
					c.Close()
					return nil
				}
				if err == nil {
					err = fmt.Errorf("PING answered %q", strings.TrimSpace(line))
				}
			}
			c.Close()
		}
		last = err
		time.Sleep(20 * time.Millisecond) // polling a process we just started
	}
	return last
}

// Shared wraps t for servers that outlive the test that starts them, such
// as one server shared by a whole package: cleanups are not registered and
// data directories are not tied to t. The caller must Stop the servers (and
// may remove their Dir), typically in TestMain.
func Shared(t testing.TB) testing.TB { return sharedT{t} }

type sharedT struct{ testing.TB }

func (sharedT) Cleanup(func()) {}

func (s sharedT) TempDir() string {
	d, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		s.Fatalf("temp dir: %v", err)
	}
	return d
}

// Cluster is a running Redis Cluster: primaries, each with its replicas.
// Roles change with failovers; Nodes and Replicas say what they were at
// start, and Master says who serves a shard now.
type Cluster struct {
	// Nodes are the primaries at start: shard i's at Nodes[i].
	Nodes []*Server
	// Replicas[i] replicated Nodes[i] at start.
	Replicas [][]*Server
	// Proxies[i], when set, is the proxy clients reach shard i's primary
	// through: the primary announces the proxy's address to the cluster.
	Proxies map[int]*Proxy
	// Ranges[i] are shard i's slots, first and last.
	Ranges [][2]int
}

// ClusterOptions configure StartClusterWith.
type ClusterOptions struct {
	// Primaries is the number of shards; 0 means 3.
	Primaries int
	// Replicas is the number of replicas of each primary.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a primary may not
	// answer before its replica takes over; 0 means 15s.
	NodeTimeout time.Duration
	// Proxied lists the shards whose primary clients reach through a Proxy
	// (see Cluster.Proxies).
	Proxied []int
	// Extra are more config directives for every node, "name value".
	Extra []string
	// Username and Password authenticate the helpers' clients, for Extra
	// that turns the default user off (see Server.Username).
	Username, Password string
}

// Addrs lists the primaries' addresses at start, as seeds for a client (the
// proxies' for proxied primaries).
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
		if p := c.Proxies[i]; p != nil {
			a[i] = p.Addr
		}
	}
	return a
}

// All lists every node: the primaries at start, then the replicas.
func (c *Cluster) All() []*Server {
	all := append([]*Server(nil), c.Nodes...)
	for _, rs := range c.Replicas {
		all = append(all, rs...)
	}
	return all
}

// ShardOf returns the shard serving slot.
func (c *Cluster) ShardOf(slot int) int {
	for i, r := range c.Ranges {
		if slot >= r[0] && slot <= r[1] {
			return i
		}
	}
	return -1
}

// RangeName names shard i by its slots as the store's breakers do: "lo-hi".
func (c *Cluster) RangeName(i int) string {
	return fmt.Sprintf("%d-%d", c.Ranges[i][0], c.Ranges[i][1])
}

// StartCluster runs n primaries on free loopback ports and forms a cluster
// from Go: CLUSTER MEET, ADDSLOTSRANGE split evenly, then waits until every
// node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{Primaries: n})
}

// StartClusterWith runs a cluster: primaries with ADDSLOTSRANGE split
// evenly, replicas attached with CLUSTER REPLICATE, every node met by the
// first. It returns once every node reports cluster_state:ok, knows every
// other node, and every replica has synced.
func StartClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	testtier.Integration(t, "redis-server")
	if o.Primaries <= 0 {
		o.Primaries = 3
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = 15 * time.Second
	}
	n := o.Primaries
	cfg := append([]string{"cluster-enabled yes", fmt.Sprintf("cluster-node-timeout %d", o.NodeTimeout.Milliseconds()),
		"cluster-config-file nodes.conf", "cluster-require-full-coverage no"}, o.Extra...)
	start := func(addr string, extra ...string) *Server {
		// A node learns a peer's address from where the peer's
		// connection comes from, 127.0.0.1 for any loopback address the
		// kernel is asked to reach: it announces its own address
		// instead (the proxied ones the proxy's, set after this).
		host, _, _ := net.SplitHostPort(addr)
		return startWithAuth(t, addr, t.TempDir(), o.Username, o.Password, append([]string{"cluster-announce-ip " + host}, extra...)...)
	}
	c := &Cluster{Proxies: map[int]*Proxy{}, Replicas: make([][]*Server, n)}
	for i := range n {
		c.Ranges = append(c.Ranges, [2]int{i * 16384 / n, (i+1)*16384/n - 1})
		extra := cfg
		if slices.Contains(o.Proxied, i) {
			addr := freeClusterAddr(t)
			p := StartProxy(t, addr)
			c.Proxies[i] = p
			host, port, _ := net.SplitHostPort(p.Addr)
			_, realPort, _ := net.SplitHostPort(addr)
			rp, _ := strconv.Atoi(realPort)
			extra = append(slices.Clone(cfg), "cluster-announce-ip "+host, "cluster-announce-port "+port,
				fmt.Sprintf("cluster-announce-bus-port %d", rp+10000))
			c.Nodes = append(c.Nodes, start(addr, extra...))
			continue
		}
		c.Nodes = append(c.Nodes, start(freeClusterAddr(t), extra...))
	}
	for i := range n {
		for range o.Replicas {
			c.Replicas[i] = append(c.Replicas[i], start(freeClusterAddr(t), cfg...))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := c.Nodes[0].Client(t)
	all := c.All()
	for _, node := range all[1:] {
		host, port, _ := net.SplitHostPort(node.Addr)
		if err := first.ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", node.Addr, err)
		}
	}
	for i, node := range c.Nodes {
		if err := node.Client(t).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", c.Ranges[i][0], c.Ranges[i][1]).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE %d %d on %s: %v", c.Ranges[i][0], c.Ranges[i][1], node.Addr, err)
		}
	}
	poll(t, ctx, "every node knows every other", func() (bool, string) {
		for _, node := range all {
			info, err := node.Client(t).ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(all))) {
				return false, fmt.Sprintf("%s: %v %s", node.Addr, err, info)
			}
		}
		return true, ""
	})
	for i, node := range c.Nodes {
		id, err := node.Client(t).Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("CLUSTER MYID on %s: %v", node.Addr, err)
		}
		for _, r := range c.Replicas[i] {
			if err := r.Client(t).Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err != nil {
				t.Fatalf("CLUSTER REPLICATE %s on %s: %v", id, r.Addr, err)
			}
		}
	}
	c.WaitHealthy(t, time.Until(deadlineOf(ctx)))
	return c
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// poll calls cond until it is true or ctx ends, failing the test with
// cond's last explanation then.
func poll(t testing.TB, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, why := cond()
		if ok {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: %s: not within the deadline: %s", what, why)
		}
		time.Sleep(50 * time.Millisecond) // polling the cluster's gossip
	}
}

// nodeFor returns the node whose address (or proxy address) is addr.
func (c *Cluster) nodeFor(addr string) *Server {
	for i, n := range c.Nodes {
		if n.Addr == addr || (c.Proxies[i] != nil && c.Proxies[i].Addr == addr) {
			return n
		}
	}
	for _, n := range c.All() {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Master returns the node that running nodes say serves shard i now, or
// nil when they don't agree on a running one.
func (c *Cluster) Master(i int) *Server {
	var found *Server
	for _, node := range c.All() {
		if !node.Running() {
			continue
		}
		v, err := node.do("CLUSTER", "SLOTS")
		if err != nil {
			return nil
		}
		m := c.masterIn(v, c.Ranges[i][0])
		if m == nil || !m.Running() || (found != nil && found != m) {
			return nil
		}
		found = m
	}
	return found
}

// masterIn reads the master of slot from a CLUSTER SLOTS reply.
func (c *Cluster) masterIn(reply any, slot int) *Server {
	ranges, _ := reply.([]any)
	for _, r := range ranges {
		f, _ := r.([]any)
		if len(f) < 3 {
			continue
		}
		lo, _ := f[0].(int64)
		hi, _ := f[1].(int64)
		if int64(slot) < lo || int64(slot) > hi {
			continue
		}
		node, _ := f[2].([]any)
		if len(node) < 2 {
			return nil
		}
		host, _ := node[0].(string)
		port, _ := node[1].(int64)
		return c.nodeFor(net.JoinHostPort(host, strconv.FormatInt(port, 10)))
	}
	return nil
}

// WaitHealthy waits until every running node reports cluster_state:ok,
// every shard has a running master that all agree on, and every running
// replica of it has synced.
func (c *Cluster) WaitHealthy(t testing.TB, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	poll(t, ctx, "cluster healthy", func() (bool, string) {
		for _, node := range c.All() {
			if !node.Running() {
				continue
			}
			v, err := node.do("CLUSTER", "INFO")
			if s, _ := v.(string); err != nil || !strings.Contains(s, "cluster_state:ok") {
				return false, fmt.Sprintf("%s: %v %v", node.Addr, err, v)
			}
			v, err = node.do("INFO", "replication")
			s, _ := v.(string)
			if err != nil || (strings.Contains(s, "role:slave") && !strings.Contains(s, "master_link_status:up")) {
				return false, fmt.Sprintf("%s replication: %v %v", node.Addr, err, s)
			}
		}
		for i := range c.Nodes {
			if c.Master(i) == nil {
				return false, fmt.Sprintf("shard %d has no agreed running master", i)
			}
		}
		return true, ""
	})
}

// WaitFailover waits until shard i is served by a running master other
// than old (a promoted replica), and returns it.
func (c *Cluster) WaitFailover(t testing.TB, i int, old *Server, within time.Duration) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var m *Server
	poll(t, ctx, fmt.Sprintf("shard %d failed over", i), func() (bool, string) {
		m = c.Master(i)
		if m == nil || m == old {
			return false, fmt.Sprintf("master %v", m)
		}
		return true, ""
	})
	return m
}

// StartNode runs a cluster-enabled redis-server on addr that keeps its
// state in dir: nodes.conf and an append-only file, as a pod's volume does.
// A node stopped and started again with the same dir, on the same or on a
// new address, comes back with its node ID and its keys. It announces addr
// to the cluster (cluster-announce-ip), as a pod announces its IP. Extra
// config directives are "name value".
func StartNode(t testing.TB, addr, dir string, nodeTimeout time.Duration, extra ...string) *Server {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("bad address %q: %v", addr, err)
	}
	cfg := []string{"cluster-enabled yes", "cluster-config-file nodes.conf",
		fmt.Sprintf("cluster-node-timeout %d", nodeTimeout.Milliseconds()),
		"cluster-require-full-coverage no", "cluster-announce-ip " + host,
		"appendonly yes", "appendfsync everysec"}
	return startIn(t, addr, dir, append(cfg, extra...)...)
}

// startIn is StartAt with a given data directory. The server runs with a
// configuration file in dir, redistest.conf: the address, dir and test
// defaults, then the extra directives as lines, so that a later directive
// overrides an earlier one and a directive of several arguments (user,
// include) reads as it does in a redis.conf; a value with spaces is
// quoted ("requirepass \"a b\"").
func startIn(t testing.TB, addr, dir string, extra ...string) *Server {
	t.Helper()
	return startWithAuth(t, addr, dir, "", "", extra...)
}

// startWithAuth is startIn for a server whose helpers authenticate as
// username and password from the start.
func startWithAuth(t testing.TB, addr, dir, username, password string, extra ...string) *Server {
	t.Helper()
	testtier.Integration(t, "redis-server")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("bad address %q: %v", addr, err)
	}
	s := &Server{Addr: addr, Dir: dir, Username: username, Password: password, conf: filepath.Join(dir, "redistest.conf")}
	lines := append([]string{
		"bind " + host, "port " + port, "dir " + s.Dir,
		`save ""`, "appendonly no", "protected-mode no",
		"daemonize no", "logfile " + filepath.Join(s.Dir, "redis.log"),
	}, extra...)
	if err := os.WriteFile(s.conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatalf("redis config: %v", err)
	}
	s.start(t)
	t.Cleanup(s.Stop)
	return s
}
