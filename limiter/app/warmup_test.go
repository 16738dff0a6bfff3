package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testwait"
	"github.com/sluice-dev/sluice/limiter/server"
)

// TestNotServingUntilTheStoreIsWarm: a limiter started while its Redis
// Cluster cannot be reached (its only seed refuses connections, as a
// restarted node's pod whose network is not up yet) has its policies but
// says it cannot decide, on both of the paths clients are steered by:
// /readyz (a Service's endpoints) and gRPC health (a gateway balancing
// over the pods with health checks). Once its store has loaded the slot
// map, both say it serves. The warm-up bound is an hour, so only the store
// can make it ready.
func TestNotServingUntilTheStoreIsWarm(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	seed := redistest.StartProxy(t, c.Nodes[0].Addr)
	seed.Cut()
	host := redistest.Host()
	cfg := Config{Policies: "../../config/samples/policies.yaml", Store: "redis-cluster://" + seed.Addr,
		RedisTimeout: time.Second, GRPCAddr: redistest.FreeAddr(t, host), HTTPAddr: redistest.FreeAddr(t, host),
		AdminAddr: redistest.FreeAddr(t, host), Logger: slog.New(slog.DiscardHandler), warmup: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn, err := grpc.NewClient("passthrough:///"+cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	health := healthpb.NewHealthClient(conn)

	st := await(t, "the limiter answering, its policies loaded", func() (servingState, bool) {
		st := readState(cfg.HTTPAddr, health)
		return st, st.snapshot
	})
	if st.ready || st.grpc != healthpb.HealthCheckResponse_NOT_SERVING.String() {
		t.Fatalf("with its store unreachable: %s; want /readyz 503 (warming up) and gRPC health NOT_SERVING", st)
	}
	t.Logf("with its store unreachable: %s", st)
	seed.Restore()
	st = await(t, "ready once the store is warm", func() (servingState, bool) {
		st := readState(cfg.HTTPAddr, health)
		return st, st.ready && st.grpc == healthpb.HealthCheckResponse_SERVING.String()
	})
	t.Logf("once the store reached Redis: %s", st)
}

// servingState is what a limiter says of itself on /readyz and gRPC
// health.
type servingState struct {
	snapshot, ready bool
	store           string // /readyz's store check
	grpc            string // the RLS service's gRPC health
}

func (s servingState) String() string {
	return fmt.Sprintf("/readyz ready %v (store: %s), gRPC health %s", s.ready, s.store, s.grpc)
}

func readState(httpAddr string, health healthpb.HealthClient) servingState {
	var st servingState
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: server.RLSServiceName}, grpc.WaitForReady(true)); err != nil {
		st.grpc = err.Error()
	} else {
		st.grpc = resp.GetStatus().String()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		st.store = err.Error()
		return st
	}
	defer func() { _ = resp.Body.Close() }()
	var r server.Readiness
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		st.store = err.Error()
		return st
	}
	st.snapshot, st.ready = r.Checks["snapshot"].OK, r.Ready && resp.StatusCode == http.StatusOK
	st.store = r.Checks["store"].Detail
	return st
}

// await polls f until it reports true, failing with what it saw last.
func await(t *testing.T, what string, f func() (servingState, bool)) servingState {
	t.Helper()
	deadline := testwait.New(time.Minute)
	for {
		st, ok := f()
		if ok {
			return st
		}
		if deadline.Passed(t.Logf) {
			t.Fatalf("%s: not within %v; last seen: %s", what, deadline.Waited(), st)
		}
		time.Sleep(50 * time.Millisecond) // polling the limiter under test
	}
}
