// Package redistest starts real redis-server processes on loopback for
// tests: a standalone server, or a Redis Cluster formed from Go.
//
// The binary is $REDIS_SERVER, or redis-server on PATH (`make test`
// installs it). Tests fail, not skip, when it is missing: a skipped store
// test proves nothing.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Server is one running redis-server.
type Server struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
	args []string
	mu   sync.Mutex
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

// FreeAddr returns a free TCP address on ip (e.g. "127.0.0.1").
func FreeAddr(t testing.TB, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start runs a standalone redis-server on a free loopback port, stopped
// when the test ends. Extra config directives may be given as "name value".
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartAt(t, FreeAddr(t, "127.0.0.1"), extra...)
}

// StartAt runs redis-server on addr (host:port).
func StartAt(t testing.TB, addr string, extra ...string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("bad address %q: %v", addr, err)
	}
	s := &Server{Addr: addr, Dir: t.TempDir()}
	s.args = []string{
		"--bind", host, "--port", port, "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no",
		"--daemonize", "no", "--logfile", filepath.Join(s.Dir, "redis.log"),
	}
	for _, e := range extra {
		name, value, _ := strings.Cut(e, " ")
		s.args = append(s.args, "--"+name, value)
	}
	s.start(t)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.cmd = exec.Command(Binary(t), s.args...)
	if err := s.cmd.Start(); err != nil {
		s.mu.Unlock()
		t.Fatalf("start redis-server: %v", err)
	}
	s.mu.Unlock()
	if err := waitPing(s.Addr, 10*time.Second); err != nil {
		t.Fatalf("redis-server on %s did not answer: %v\n%s", s.Addr, err, s.Log())
	}
}

// Log returns the server's log file.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// Stop kills the server.
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
}

// Pause stops the process with SIGSTOP, as a stalled node: connections stay
// open and nothing answers.
func (s *Server) Pause(t testing.TB) { s.signal(t, syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(t testing.TB) { s.signal(t, syscall.SIGCONT) }

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("redis-server on %s is not running", s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal redis-server: %v", err)
	}
}

// Restart stops the server and starts it again with the same settings.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Client returns a client for this server, closed when the test ends.
func (s *Server) Client(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
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
				if err == nil && strings.HasPrefix(line, "+PONG") {
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

// Cluster is a running Redis Cluster of primaries (no replicas).
type Cluster struct {
	Nodes []*Server
}

// Addrs lists the nodes' addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// StartCluster runs n primaries on free loopback ports and forms a cluster
// from Go: CLUSTER MEET, ADDSLOTSRANGE split evenly, then waits until every
// node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, Start(t, "cluster-enabled yes", "cluster-node-timeout 15000",
			"cluster-config-file nodes.conf", "cluster-require-full-coverage no"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := c.Nodes[0].Client(t)
	for i, node := range c.Nodes {
		host, port, _ := net.SplitHostPort(node.Addr)
		p, _ := strconv.Atoi(port)
		if i > 0 {
			if err := first.ClusterMeet(ctx, host, strconv.Itoa(p)).Err(); err != nil {
				t.Fatalf("CLUSTER MEET %s: %v", node.Addr, err)
			}
		}
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := node.Client(t).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, node.Addr, err)
		}
	}
	for _, node := range c.Nodes {
		cl := node.Client(t)
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cluster did not form on %s: %v %s", node.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond) // polling gossip convergence
		}
	}
	return c
}
