package app

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/config/kube"
)

// source is where the policies come from: a policy file, or a snapshot
// ConfigMap read through the API server.
type source struct {
	file   string
	cm     kube.Name
	client rest.Interface // set for a ConfigMap
}

// openSource checks cfg's source. A policy file is loaded now, so that a
// bad one fails the start; a ConfigMap is loaded by watch once serving, and
// the limiter is unready until it is.
func openSource(cfg Config) (source, *config.Snapshot, error) {
	switch {
	case cfg.Policies != "" && cfg.SnapshotConfigMap != "":
		return source{}, nil, errors.New("policies: give a policy file or a snapshot ConfigMap, not both")
	case cfg.Policies != "":
		snap, err := config.LoadPath(cfg.Policies)
		return source{file: cfg.Policies}, snap, err
	case cfg.SnapshotConfigMap == "":
		return source{}, nil, errors.New("policies: give a policy file or a snapshot ConfigMap")
	}
	cm, err := kube.ParseName(cfg.SnapshotConfigMap)
	if err != nil {
		return source{}, nil, fmt.Errorf("snapshot ConfigMap %w", err)
	}
	rc, err := kube.RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return source{}, nil, err
	}
	client, err := kube.NewClient(rc)
	if err != nil {
		return source{}, nil, err
	}
	return source{cm: cm, client: client}, nil, nil
}

// String is "file PATH" or "configmap NAMESPACE/NAME".
func (s source) String() string {
	if s.client != nil {
		return "configmap " + s.cm.String()
	}
	return "file " + s.file
}

// name is "policy file PATH" or "ConfigMap NAMESPACE/NAME".
func (s source) name() string {
	if s.client != nil {
		return "ConfigMap " + s.cm.String()
	}
	return "policy file " + s.file
}

// kind starts log messages: "Policy file" or "Snapshot ConfigMap".
func (s source) kind() string {
	if s.client != nil {
		return "Snapshot ConfigMap"
	}
	return "Policy file"
}

// watch hot-reloads the policies into rl until ctx ends.
func (s source) watch(ctx context.Context, rl *reloader) error {
	if s.client == nil {
		return config.Watch(ctx, s.file, rl.onLoad, rl.onError)
	}
	return kube.Watch(ctx, s.client, s.cm, kube.Handler{
		Load:        rl.onLoad,
		Invalid:     rl.onError,
		Missing:     rl.onMissing,
		Unreachable: rl.onUnreachable,
	})
}

// onMissing: the snapshot ConfigMap doesn't exist, at start or any more.
func (r *reloader) onMissing() {
	r.mu.Lock()
	r.lastErr, r.known, r.missing, r.unreachable = nil, true, true, nil
	r.mu.Unlock()
	if cur := r.svc.Snapshot(); cur != nil {
		r.log.Warn("Snapshot ConfigMap not found; keeping the loaded policies", "source", r.src.String(), "version", cur.Version)
		return
	}
	r.log.Warn("Snapshot ConfigMap not found; waiting for it, not ready", "source", r.src.String())
}

// onUnreachable: the API server didn't list or watch the ConfigMap. Until
// the ConfigMap's state is known, readiness says why.
func (r *reloader) onUnreachable(err error) {
	r.mu.Lock()
	if !r.known {
		r.unreachable = err
	}
	r.mu.Unlock()
	r.log.Warn("Cannot list or watch the snapshot ConfigMap; retrying", "source", r.src.String(), "error", err)
}
