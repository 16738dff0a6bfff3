package app

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

func TestOpenSourceErrors(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "give a policy file or a snapshot ConfigMap"},
		{Config{Policies: "p.yaml", SnapshotConfigMap: "ns/name"}, "not both"},
		{Config{SnapshotConfigMap: "name"}, `snapshot ConfigMap "name": want NAMESPACE/NAME`},
		{Config{SnapshotConfigMap: "ns/Name"}, `name "Name"`},
		{Config{SnapshotConfigMap: "ns/name", Kubeconfig: filepath.Join(t.TempDir(), "missing")}, "kubeconfig: "},
	} {
		if _, _, err := openSource(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}

	src, snap, err := openSource(Config{SnapshotConfigMap: "fleet/snap", Kubeconfig: kubeconfig})
	if err != nil || snap != nil || src.String() != "configmap fleet/snap" || src.name() != "ConfigMap fleet/snap" {
		t.Fatalf("openSource: %v %v %v", src, snap, err)
	}
	// Until a snapshot is loaded the "config" check fails, saying what the
	// limiter waits for; the admin status says the same.
	st := memory.New(memory.Options{})
	defer st.Close()
	reg := prometheus.NewRegistry()
	svc := service.New(st, service.Options{Registerer: reg})
	rl := newReloader(src, svc, reg, slog.New(slog.DiscardHandler))
	steps := []struct {
		event      func()
		want, last string
	}{
		{func() {}, "waiting for ConfigMap fleet/snap: not listed yet", "not listed yet"},
		{func() { rl.onUnreachable(errors.New("forbidden")) }, "waiting for ConfigMap fleet/snap: forbidden", "forbidden"},
		{rl.onMissing, "waiting for ConfigMap fleet/snap: not found", "not found"},
		// Known missing: a later watch error is only logged.
		{func() { rl.onUnreachable(errors.New("connection refused")) }, "waiting for ConfigMap fleet/snap: not found", "not found"},
		{func() { rl.onError(errors.New("snapshot document: bad")) }, "waiting for ConfigMap fleet/snap: invalid: snapshot document: bad", "invalid: snapshot document: bad"},
	}
	for _, s := range steps {
		s.event()
		if _, err := rl.check(t.Context()); err == nil || err.Error() != s.want {
			t.Errorf("check: %v, want %q", err, s.want)
		}
		if source, last := rl.status(); source != "configmap fleet/snap" || last != s.last {
			t.Errorf("status: %q %q, want last error %q", source, last, s.last)
		}
	}
}
