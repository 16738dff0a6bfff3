package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// snapshotOf compiles one policy shop/per-user, as a snapshot document
// from the API server would carry it.
func snapshotOf(t *testing.T, limit int64, enforcement config.Enforcement) *config.Snapshot {
	t.Helper()
	p := v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "per-user", UID: "uid-1", Generation: limit},
		Spec: v1alpha1.RateLimitPolicySpec{
			Domain:      "shop",
			Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Rate:        v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: time.Minute}},
		},
	}
	doc, version := config.EncodeDocument(config.DocumentFor(policytest.Sources([]v1alpha1.RateLimitPolicy{p}...), enforcement))
	snap, err := config.ParseDocument(doc)
	if err != nil || snap.Version != version {
		t.Fatalf("ParseDocument: %v (version %s, want %s)", err, snap.Version, version)
	}
	return snap
}

// startAdmin runs a server without a snapshot whose source reports
// lastError.
func startAdmin(t *testing.T, lastError string) (*server.Server, string) {
	t.Helper()
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	svc := newService(t, st, service.Options{Registerer: prometheus.NewRegistry()})
	srv, err := server.New(svc, server.Options{
		GRPCAddr: "127.0.0.1:0",
		HTTPAddr: "127.0.0.1:0",
		Logger:   slog.New(slog.DiscardHandler),
		SnapshotSource: func() (string, string) {
			return "configmap fleet/snap", lastError
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return srv, "http://" + srv.AdminAddr() + limiterwire.SnapshotPath
}

func adminGet(t *testing.T, url string) limiterwire.Snapshot {
	t.Helper()
	resp, body := get(t, url)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	var out limiterwire.Snapshot
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("GET %s: %q: %v", url, body, err)
	}
	return out
}

func TestAdminSnapshot(t *testing.T) {
	srv, url := startAdmin(t, "not found")

	// Before a snapshot: 200, with empty fields and no loadedAt.
	resp, body := get(t, url)
	if want := `{"version":"","enforcement":"","policies":[],"source":"configmap fleet/snap","lastError":"not found"}` + "\n"; resp.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("before a snapshot: %d %s, want 200 %s", resp.StatusCode, body, want)
	}

	before := time.Now()
	snap := snapshotOf(t, 5, config.EnforcementDisabled)
	srv.Swap(snap)
	got := adminGet(t, url)
	want := limiterwire.Snapshot{
		Version:     snap.Version,
		Enforcement: string(config.EnforcementDisabled),
		Policies:    []limiterwire.Policy{{Namespace: "shop", Name: "per-user", UID: "uid-1", Generation: 5}},
		Source:      "configmap fleet/snap",
		LastError:   "not found",
		ReadyPods:   1,
	}
	if got.LoadedAt.Before(before) || got.LoadedAt.After(time.Now()) {
		t.Errorf("loadedAt %v, want the time of the Swap", got.LoadedAt)
	}
	got.LoadedAt = time.Time{}
	if gb, wb := mustJSON(t, got), mustJSON(t, want); gb != wb {
		t.Errorf("after Swap:\n got %s\nwant %s", gb, wb)
	}
	_, body = get(t, url)
	var raw struct{ LoadedAt string }
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339Nano, raw.LoadedAt); err != nil {
		t.Errorf("loadedAt %q: %v", raw.LoadedAt, err)
	}

	for _, q := range []string{"?waitForVersion=x&timeout=soon", "?waitForVersion=x&timeout=-1s"} {
		if resp, body := get(t, url+q); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "timeout") {
			t.Errorf("%s: %d %s, want 400 naming timeout", q, resp.StatusCode, body)
		}
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := do(t, req); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAdminSnapshotLongPoll(t *testing.T) {
	srv, url := startAdmin(t, "")
	v5, v7 := snapshotOf(t, 5, ""), snapshotOf(t, 7, "")

	// The version loaded: answered at once, whatever the timeout.
	srv.Swap(v5)
	if got := adminGet(t, url+"?waitForVersion="+v5.Version+"&timeout=10s"); got.Version != v5.Version {
		t.Fatalf("waiting for the loaded version: %s", got.Version)
	}

	// Another version: answered when it is swapped in. A Swap of some
	// other version does not end the wait.
	answer := make(chan limiterwire.Snapshot, 1)
	go func() {
		answer <- adminGet(t, url+"?waitForVersion="+v7.Version+"&timeout=10s")
	}()
	srv.Swap(snapshotOf(t, 6, ""))
	srv.Swap(v7)
	select {
	case got := <-answer:
		if got.Version != v7.Version {
			t.Fatalf("long-poll answered %s, want %s", got.Version, v7.Version)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("long-poll did not answer after the Swap")
	}

	// A version that never comes: what is loaded, once the timeout ends.
	start := time.Now()
	if got := adminGet(t, url+"?waitForVersion=never&timeout=100ms"); got.Version != v7.Version {
		t.Fatalf("timed-out long-poll: %s, want %s", got.Version, v7.Version)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("timed-out long-poll answered after %v, before its timeout", waited)
	}
	// No waitForVersion: no wait.
	if got := adminGet(t, url+"?timeout=10s"); got.Version != v7.Version {
		t.Fatalf("plain GET: %s", got.Version)
	}
}

// The stats endpoint counts each policy's decisions since the process
// started, under a boot ID that is random per process.
func TestAdminStats(t *testing.T) {
	srv, snapURL := startAdmin(t, "")
	url := strings.TrimSuffix(snapURL, limiterwire.SnapshotPath) + limiterwire.StatsPath
	stats := func() limiterwire.Stats {
		t.Helper()
		resp, body := get(t, url)
		var out limiterwire.Stats
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil {
			t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
		}
		return out
	}
	before := stats()
	if len(before.BootID) != 32 || before.Policies == nil || len(before.Policies) != 0 || before.StartedAt.IsZero() {
		t.Fatalf("before a snapshot: %+v", before)
	}
	srv.Swap(snapshotOf(t, 5, config.EnforcementEnabled))
	checkURL := "http://" + srv.HTTPAddr() + server.CheckPath
	for range 7 {
		resp, err := http.Post(checkURL, "application/json", strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"kim"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := stats()
	want := []limiterwire.PolicyStats{{Namespace: "shop", Name: "per-user", UID: "uid-1", Generation: 5, Allowed: 5, Limited: 2, NearLimit: 1}}
	if got.BootID != before.BootID || mustJSON(t, got.Policies) != mustJSON(t, want) {
		t.Errorf("after 7 requests against 5:\n got %s %s\nwant %s %s", got.BootID, mustJSON(t, got.Policies), before.BootID, mustJSON(t, want))
	}
	if _, other := startAdmin(t, ""); other == snapURL {
		t.Fatal("same address")
	} else if resp, body := get(t, strings.TrimSuffix(other, limiterwire.SnapshotPath)+limiterwire.StatsPath); resp.StatusCode != http.StatusOK || strings.Contains(string(body), got.BootID) {
		t.Errorf("another process has the same boot ID: %s", body)
	}
}
