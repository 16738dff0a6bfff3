package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/internal/redistest"
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

// A rediss:// store verifies the server against --redis-ca-file and takes
// its password from $SLUICE_REDIS_PASSWORD, which needs no URL escaping.
// Each wrong setting fails with an error that names it.
func TestOpenRedisTLSWithPasswordFromEnv(t *testing.T) {
	const pw = "p@ss/w%rd:#1"
	s := redistest.StartTLS(t, "requirepass "+pw)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	once := func(cfg Config) error {
		cfg.RedisTimeout = 5 * time.Second
		st, pinger, _, err := openStore(cfg)
		if err != nil {
			return err
		}
		defer st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return pinger.Ping(ctx)
	}
	// ping is once, again while the answer is a timeout: the store dials
	// within a second, which a TLS handshake on a loaded machine can
	// outlast before it gets to the error a case is about.
	ping := func(cfg Config) error {
		deadline := time.Now().Add(time.Minute)
		for {
			err := once(cfg)
			if err == nil || !(errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout")) || time.Now().After(deadline) {
				return err
			}
			t.Logf("%s: %v: again", cfg.Store, err)
		}
	}
	tlsStore := "rediss://" + s.TLSAddr

	t.Setenv(limiterwire.RedisPasswordEnv, pw)
	if err := ping(Config{Store: tlsStore, RedisCAFile: s.CAFile}); err != nil {
		t.Fatalf("TLS with the CA and the password from the environment: %v", err)
	}
	if err := ping(Config{Store: tlsStore, RedisCAFile: s.CAFile, RedisTLSServerName: redistest.ServerName}); err != nil {
		t.Fatalf("TLS with --redis-tls-server-name %s: %v", redistest.ServerName, err)
	}
	if err := ping(Config{Store: "rediss-cluster://" + s.TLSAddr, RedisCAFile: s.CAFile}); err == nil ||
		!strings.Contains(err.Error(), "cluster support disabled") {
		t.Errorf("rediss-cluster:// against a standalone server: %v, want Redis's own answer over TLS", err)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no CA file: the system's CAs don't know the test CA", Config{Store: tlsStore}, "certificate signed by unknown authority"},
		{"a name the certificate lacks", Config{Store: tlsStore, RedisCAFile: s.CAFile, RedisTLSServerName: "cache.example.com"}, "not cache.example.com"},
		{"plain Redis protocol on the TLS port", Config{Store: "redis://" + s.TLSAddr}, "EOF"},
		{"a CA file that does not exist", Config{Store: tlsStore, RedisCAFile: "/nonexistent/ca.crt"}, "--redis-ca-file: open /nonexistent/ca.crt"},
		{"a CA file without a certificate", Config{Store: tlsStore, RedisCAFile: garbage}, "--redis-ca-file " + garbage + ": no PEM certificate in it"},
		{"a CA file for a store without TLS", Config{Store: "redis://" + s.Addr, RedisCAFile: s.CAFile}, "need a TLS store, rediss:// or rediss-cluster://"},
		{"a server name for a store without TLS", Config{Store: "redis://" + s.Addr, RedisTLSServerName: "x"}, "need a TLS store"},
		{"a password in the URL wins over the environment", Config{Store: "rediss://:wrong@" + s.TLSAddr, RedisCAFile: s.CAFile}, "WRONGPASS"},
	} {
		if err := ping(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	t.Setenv(limiterwire.RedisPasswordEnv, "wrong")
	if err := ping(Config{Store: tlsStore, RedisCAFile: s.CAFile}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("a wrong password from the environment: %v, want WRONGPASS", err)
	}
	t.Setenv(limiterwire.RedisPasswordEnv, "")
	if err := ping(Config{Store: tlsStore, RedisCAFile: s.CAFile}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no password: %v, want NOAUTH", err)
	}
}
