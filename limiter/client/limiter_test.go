package client_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// limiterBin is the limiter, built once for this test binary; limiterURL
// is the HTTP address of the one the examples use.
var limiterBin, limiterURL string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test and example here talks to a real limiter process.
		fmt.Println("limiter/client: integration tier (real limiter processes): not run with -short; make test-integration runs it")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	limiterBin = filepath.Join(dir, "limiter")
	build := exec.Command("go", "build", "-o", limiterBin, "../../cmd/limiter")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	p, err := startProcess("--store", "memory")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	limiterURL = p.http
	code := m.Run()
	p.stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// limiter is a running limiter process on testdata/policies.yaml.
type limiter struct {
	cmd    *exec.Cmd
	http   string
	exited chan error
	once   sync.Once
}

// startLimiter runs a limiter on free loopback ports until the test ends.
func startLimiter(t *testing.T, args ...string) *limiter {
	t.Helper()
	p, err := startProcess(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p
}

func startProcess(args ...string) (*limiter, error) {
	args = append([]string{"--policies", "testdata/policies.yaml", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--admin-addr", "127.0.0.1:0", "--log-format", "json", "--drain-delay", "0s"}, args...)
	p := &limiter{cmd: exec.Command(limiterBin, args...), exited: make(chan error, 1)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct{ Msg, HTTP string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "Serving" {
				serving <- rec.HTTP
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.exited <- p.cmd.Wait()
	}()
	select {
	case addr := <-serving:
		p.http = "http://" + addr
		return p, nil
	case err := <-p.exited:
		return nil, fmt.Errorf("limiter exited before serving: %v", err)
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		return nil, fmt.Errorf("limiter did not serve within 30s")
	}
}

// stop ends the limiter with SIGTERM, and waits for it.
func (p *limiter) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}
