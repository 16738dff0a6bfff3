package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/prometheus/procfs"

	"github.com/sluice-dev/sluice/internal/testnet"
)

// proc is one child process: redis-server or a limiter.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

func start(dir, name string, bin string, args ...string) (*proc, error) {
	log := filepath.Join(dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &proc{name: name, cmd: cmd, log: log}, nil
}

// stop sends SIGTERM and waits up to 10s, then kills.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// freeAddr returns a free address of the process's loopback /24
// (internal/testnet): another run beside this one never binds there.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", testnet.IP(1)+":0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// poll calls f every 50ms until it succeeds or within passes.
func poll(within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // polling a process we started
	}
}

// startRedis runs redis-server on a free loopback port.
func startRedis(dir, bin string) (*proc, *goredis.Client, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	p, err := start(dir, "redis-server", bin, "--bind", host, "--port", port, "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no")
	if err != nil {
		return nil, nil, err
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	if err := poll(10*time.Second, func() error { return c.Ping(context.Background()).Err() }); err != nil {
		p.stop()
		return nil, nil, fmt.Errorf("redis-server did not answer: %w\n%s", err, p.tail())
	}
	return p, c, nil
}

// limiter is one limiter process: a pod.
type limiter struct {
	*proc
	grpc, http, admin string
}

// startLimiters runs n limiters on policies against redisAddr and waits
// until each is ready with its policies loaded.
func startLimiters(dir, bin, policies, redisAddr string, n int) ([]*limiter, error) {
	var out []*limiter
	for i := range n {
		g, err := freeAddr()
		if err != nil {
			return out, err
		}
		h, err := freeAddr()
		if err != nil {
			return out, err
		}
		a, err := freeAddr()
		if err != nil {
			return out, err
		}
		p, err := start(dir, fmt.Sprintf("limiter-%d-of-%d", i+1, n), bin, "--policies", policies,
			"--store", "redis://"+redisAddr, "--grpc-addr", g, "--http-addr", h, "--admin-addr", a, "--log-level", "warn",
			"--tenant-max-policies-per-request", "0", "--tenant-store-calls-per-second", "0") // the limiter's own figures, unbudgeted
		if err != nil {
			return out, err
		}
		out = append(out, &limiter{proc: p, grpc: g, http: h, admin: a})
	}
	for _, l := range out {
		if err := poll(30*time.Second, func() error { return ready(l.http) }); err != nil {
			return out, fmt.Errorf("%s not ready: %w\n%s", l.name, err, l.tail())
		}
	}
	return out, nil
}

func ready(httpAddr string) error {
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// tierStats are a limiter's two-tier figures for one policy.
type tierStats struct {
	OvershootBound int64 `json:"overshootBound"`
	Local          int64 `json:"local"`
	Grants         int64 `json:"grants"`
	CachedDenials  int64 `json:"cachedDenials"`
}

// readTier reads a limiter's two-tier figures for policy on
// /v1/admin/stats on its admin address; ok is false when it reports none.
func readTier(adminAddr, namespace, name string) (st tierStats, ok bool) {
	resp, err := http.Get("http://" + adminAddr + "/v1/admin/stats")
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	var body struct {
		Policies []struct {
			Namespace, Name string
			LocalTier       *tierStats `json:"localTier"`
		} `json:"policies"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return st, false
	}
	for _, p := range body.Policies {
		if p.Namespace == namespace && p.Name == name && p.LocalTier != nil {
			return *p.LocalTier, true
		}
	}
	return st, false
}

// fleetTier sums the limiters' figures; the bound is the largest reported,
// -1 when none reports one.
func fleetTier(ls []*limiter) tierStats {
	sum := tierStats{OvershootBound: -1}
	for _, l := range ls {
		st, ok := readTier(l.admin, "bench", "fleet")
		if !ok {
			continue
		}
		sum.OvershootBound = max(sum.OvershootBound, st.OvershootBound)
		sum.Local += st.Local
		sum.Grants += st.Grants
		sum.CachedDenials += st.CachedDenials
	}
	return sum
}

// commandStats reads INFO commandstats: EVALSHA and EVAL calls (round trips
// of scripts), and every command counted, those run inside scripts
// included, but not the harness's own INFO, CONFIG and PING.
func commandStats(ctx context.Context, c *goredis.Client) (scripts, all int64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		switch name {
		case "info", "config|resetstat", "config", "ping":
			continue
		case "evalsha", "eval":
			scripts += n
		}
		all += n
	}
	return scripts, all, sc.Err()
}

// cpuSeconds is the CPU (utime+stime, /proc/PID/stat) the processes spent
// so far, summed; a process whose stat can't be read counts 0.
func cpuSeconds(ps ...*proc) float64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, p := range ps {
		if p == nil || p.cmd.Process == nil {
			continue
		}
		if pr, err := fs.Proc(p.cmd.Process.Pid); err == nil {
			if st, err := pr.Stat(); err == nil {
				total += st.CPUTime()
			}
		}
	}
	return total
}

// limiterProcs are the limiters' processes.
func limiterProcs(ls []*limiter) []*proc {
	out := make([]*proc, len(ls))
	for i, l := range ls {
		out[i] = l.proc
	}
	return out
}
