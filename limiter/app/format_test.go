package app

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
	"github.com/sluice-dev/sluice/limiter/server"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// During an upgrade a limiter may meet a snapshot document of a format it
// does not know, written by an operator of a later version: it refuses it
// with an error naming the format, and keeps serving its last good
// snapshot. (Limiters of the version before format 2 decode documents
// strictly and refuse format 2's "format" field as unknown, which lands in
// the same onError; the e2e upgrade step checks those against the real
// binary.) Here the ConfigMaps are decoded by kube.Decode, as kube.Watch
// does before it calls the Handler.
func TestNewerDocumentFormatKeepsLastGood(t *testing.T) {
	st := memory.New(memory.Options{})
	defer st.Close()
	reg := prometheus.NewRegistry()
	svc := service.New(st, service.Options{Registerer: reg})
	rl := newReloader(source{cm: kube.Name{Namespace: "fleet", Name: "snap"}}, svc, reg, slog.New(slog.DiscardHandler))
	srv, err := server.New(svc, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rl.srv = srv
	deliver := func(doc []byte, version string) {
		cm := &corev1.ConfigMap{Data: map[string]string{config.DocumentKey: string(doc)}}
		if version != "" {
			cm.Data[config.VersionKey] = version
		}
		if snap, err := kube.Decode(cm); err != nil {
			rl.onError(err)
		} else {
			rl.onLoad(snap)
		}
	}

	// The previous operator's document (format 1), then this one's.
	old, err := os.ReadFile("../config/testdata/format1/snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	oldVersion, err := os.ReadFile("../config/testdata/format1/version")
	if err != nil {
		t.Fatal(err)
	}
	deliver([]byte(strings.TrimSpace(string(old))), strings.TrimSpace(string(oldVersion))) // as the operator wrote it: no newline
	if got := svc.Snapshot(); got == nil || got.Version != strings.TrimSpace(string(oldVersion)) || len(got.Policies) != 7 {
		t.Fatalf("format 1 not loaded: %+v (last error %v)", got, rl.lastErr)
	}
	doc, version := config.EncodeDocument(config.DocumentOf(svc.Snapshot()))
	deliver(doc, version)
	if got := svc.Snapshot(); got.Version != version {
		t.Fatalf("format 2 not loaded: version %s, want %s (last error %v)", got.Version, version, rl.lastErr)
	}

	newer := strings.Replace(string(doc), `"format":2`, `"format":3`, 1)
	deliver([]byte(newer), "")
	if got := svc.Snapshot(); got.Version != version || len(got.Policies) != 7 {
		t.Fatalf("after a format-3 document the limiter serves version %s, want its last good %s", got.Version, version)
	}
	_, last := rl.status()
	if !strings.Contains(last, "format 3 is newer than this limiter knows (formats up to 2)") {
		t.Errorf("last error %q, want it to name format 3 and the highest known", last)
	}
	if _, err := rl.check(t.Context()); err != nil {
		t.Errorf("readiness after a refused document, with a good snapshot loaded: %v", err)
	}
}
