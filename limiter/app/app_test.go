package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOpenStoreErrors(t *testing.T) {
	for _, tc := range []struct{ store, want string }{
		{"postgres://u:secret@db:5432", "want memory, redis://"},
		{"redis://u:secret@", "no address"},
		{"redis://host-without-port", "has no port"},
		{"redis-cluster://a:1/3", "bad database"},
	} {
		_, _, _, err := openStore(Config{Store: tc.store, RedisTimeout: time.Second})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("store %q: %v, want an error containing %q", tc.store, err, tc.want)
		}
	}
	if got := redactURL("redis://user:secret@h:1"); strings.Contains(got, "secret") {
		t.Errorf("redactURL kept the password: %s", got)
	}
}

func TestRunFailsOnBadFileAndStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: RateLimitPolicy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Policies: bad, Store: "memory", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}
	if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Run with a bad file: %v, want an error naming it", err)
	}

	cfg.Policies = "../../config/samples/policies.yaml"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run with a cancelled context: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
