package erlcompat_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testtier"
)

// erlBin is ERL's service, built by hack/build-erl.sh (make erl).
var erlBin = func() string { p, _ := filepath.Abs("../../bin/erl"); return p }()

// settle is how long a wait for another process lasts, sized for a loaded
// 2-core machine running -race.
const settle = 2 * time.Minute

var (
	buildOnce  sync.Once
	limiterBin string
	buildErr   error
)

// needERL skips under -short (the unit tier), and otherwise fails a test
// whose ERL binary is missing, saying how to build it: a skipped
// differential test proves nothing.
func needERL(t *testing.T) {
	t.Helper()
	testtier.Integration(t, "redis-server, envoyproxy/ratelimit (bin/erl) and a limiter process")
	if _, err := os.Stat(erlBin); err != nil {
		t.Fatalf("%s is missing: build it with hack/build-erl.sh (make test-integration does)", erlBin)
	}
}

// buildLimiter builds cmd/limiter once for the test binary.
func buildLimiter(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "erlcompat-")
		if err != nil {
			buildErr = err
			return
		}
		limiterBin = filepath.Join(dir, "limiter")
		out, err := exec.Command("go", "build", "-o", limiterBin, "../../cmd/limiter").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/limiter: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return limiterBin
}

// process is a child process whose output is kept for failure messages.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, name string, env []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
	return p
}

// rlsClient dials addr and waits until it answers ShouldRateLimit.
func rlsClient(t *testing.T, p *process, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlsv3.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(settle)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, last = c.ShouldRateLimit(ctx, request("probe-unknown-domain", 0, desc(nil, "k", "v")))
		cancel()
		if last == nil {
			return c
		}
		if p.cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s on %s did not answer within %v: last %v\n%s", p.name, addr, settle, last, p.out.String())
	return nil
}

// startERL runs ERL on configDir's files (RUNTIME_ROOT/ratelimit/config),
// counting on the redis-server at redisAddr.
func startERL(t *testing.T, runtimeRoot, redisAddr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	env, grpcAddr := erlEnv(t, runtimeRoot, redisAddr)
	p := start(t, "envoyproxy/ratelimit", env, erlBin)
	return rlsClient(t, p, grpcAddr)
}

// erlEnv is ERL's environment for runtimeRoot's ratelimit/config folder
// and the redis-server at redisAddr, on free ports of the test process's
// own loopback address (another process can't take them between the pick
// and ERL's listen), and the address of its gRPC port.
func erlEnv(t *testing.T, runtimeRoot, redisAddr string) (env []string, grpcAddr string) {
	t.Helper()
	port := func() string {
		a := redistest.FreeAddr(t, redistest.Host())
		return a[strings.LastIndexByte(a, ':')+1:]
	}
	grpcPort := port()
	return []string{
		"RUNTIME_ROOT=" + runtimeRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "USE_STATSD=false", "LOG_LEVEL=warn",
		"HOST=" + redistest.Host(), "PORT=" + port(), "GRPC_HOST=" + redistest.Host(), "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=" + redistest.Host(), "DEBUG_PORT=" + port(),
	}, redistest.Host() + ":" + grpcPort
}

// startSluiceERLEnv runs the limiter as ERL's Deployment would after an
// image swap: --erl-env and ERL's environment (the one startERL sets), with
// runtimeRoot's ratelimit/config folder and the redis-server at redisAddr.
func startSluiceERLEnv(t *testing.T, runtimeRoot, redisAddr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	env, grpcAddr := erlEnv(t, runtimeRoot, redisAddr)
	p := start(t, "sluice limiter --erl-env", env, buildLimiter(t), "--erl-env", "--erl-max-override", "1000/second")
	return rlsClient(t, p, grpcAddr)
}

// startSluice runs the limiter with --policies configDir on store.
func startSluice(t *testing.T, configDir, store string) rlsv3.RateLimitServiceClient {
	t.Helper()
	grpcAddr := redistest.FreeAddr(t, redistest.Host())
	// ERL honours any limit a request sets; Sluice bounds it.
	p := start(t, "sluice limiter", nil, buildLimiter(t), "--policies", configDir, "--store", store, "--erl-max-override", "1000/second",
		"--grpc-addr", grpcAddr, "--http-addr", redistest.FreeAddr(t, redistest.Host()), "--admin-addr", redistest.FreeAddr(t, redistest.Host()))
	return rlsClient(t, p, grpcAddr)
}

// desc is a descriptor of entries given as key, value pairs, with its own
// hits_addend when hits is not nil.
func desc(hits *uint64, kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	return d
}

// withLimit gives d its own limit (the descriptor's limit field), rpu per
// unit.
func withLimit(d *ratelimitv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

func request(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}
