package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
)

// event is one Handler call.
type event struct {
	kind    string // load, invalid, missing, unreachable
	version string // of a load
	err     error
}

// watch runs kube.Watch on cm as the user of cfg until the test ends, and
// returns its Handler calls in order.
func watch(t *testing.T, cfg *rest.Config, cm kube.Name) <-chan event {
	t.Helper()
	rc, err := kube.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan event, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kube.Watch(ctx, rc, cm, kube.Handler{
			Load:        func(s *config.Snapshot) { events <- event{kind: "load", version: s.Version} },
			Invalid:     func(err error) { events <- event{kind: "invalid", err: err} },
			Missing:     func() { events <- event{kind: "missing"} },
			Unreachable: func(err error) { events <- event{kind: "unreachable", err: err} },
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	})
	return events
}

func next(t *testing.T, events <-chan event, kind, version string) event {
	t.Helper()
	select {
	case ev := <-events:
		if ev.kind != kind || ev.version != version {
			t.Fatalf("got %s %s (%v), want %s %s", ev.kind, ev.version, ev.err, kind, version)
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s %s within 30s", kind, version)
		return event{}
	}
}

// TestWatch drives one ConfigMap through its life against a real API
// server and checks each Handler call, in order. An update that changes
// nothing the limiter loads calls nothing: the next call seen is the one
// of the update after it.
func TestWatch(t *testing.T) {
	env, cfg := startAPIServer(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}); err != nil {
		t.Fatal(err)
	}
	name := kube.Name{Namespace: "fleet", Name: "snap"}
	events := watch(t, cfg, name)

	next(t, events, "missing", "")

	doc5, v5 := document(5)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "snap"}, Data: plainCM(doc5, v5).Data}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	next(t, events, "load", v5)

	// Neither another ConfigMap nor a label on this one is news.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "snap-2"}, Data: plainCM(doc5, v5).Data}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	cm.Labels = map[string]string{"touched": "yes"}
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}

	cm.Data = map[string]string{config.DocumentKey: `{"policies": [`}
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, events, "invalid", ""); !strings.Contains(ev.err.Error(), "snapshot document") {
		t.Errorf("invalid: %v", ev.err)
	}

	// Good again with the same version: loaded again, so the caller learns it.
	cm.Data = plainCM(doc5, v5).Data
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	next(t, events, "load", v5)

	doc7, v7 := document(7)
	cm.Data = map[string]string{config.VersionKey: v7}
	cm.BinaryData = map[string][]byte{config.DocumentGzipKey: gz(t, doc7)}
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	next(t, events, "load", v7)

	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	next(t, events, "missing", "")

	cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "snap"}, Data: plainCM(doc7, v7).Data}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	next(t, events, "load", v7)

	// A user without RBAC on the ConfigMap is told why, and retried.
	nobody, err := env.AddUser(envtest.User{Name: "nobody"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	denied := watch(t, nobody.Config(), name)
	ev := next(t, denied, "unreachable", "")
	if !apierrors.IsForbidden(ev.err) {
		t.Errorf("unreachable: %v, want Forbidden", ev.err)
	}
}
