// Package kube loads limiter snapshots from the ConfigMap an operator writes
// for a fleet, through the API server: an informer on that one object, so a
// change is loaded as soon as the API server has it, without waiting for
// kubelet to refresh a mounted file. The limiter needs get, list and watch on
// that one ConfigMap name and nothing else.
package kube

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/limiter/config"
)

// MaxDocumentBytes bounds a snapshot document once decompressed, so that a
// small compressed ConfigMap can't exhaust the limiter's memory.
const MaxDocumentBytes = 64 << 20

// Name is a ConfigMap's namespace and name.
type Name struct{ Namespace, Name string }

func (n Name) String() string { return n.Namespace + "/" + n.Name }

// ParseName parses "NAMESPACE/NAME".
func ParseName(s string) (Name, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(name, "/") {
		return Name{}, fmt.Errorf("%q: want NAMESPACE/NAME", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return Name{}, fmt.Errorf("%q: namespace %q: %s", s, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return Name{}, fmt.Errorf("%q: name %q: %s", s, name, strings.Join(errs, "; "))
	}
	return Name{Namespace: ns, Name: name}, nil
}

// RESTConfig finds the API server as controller-runtime does: the
// kubeconfig file when one is given, else $KUBECONFIG, else the in-cluster
// config of a pod, else ~/.kube/config.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	case os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "":
		cfg, err = deferredConfig()
	default:
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			cfg, err = deferredConfig()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "sluice-limiter"
	return cfg, nil
}

func deferredConfig() (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
}

// NewClient returns a client of the core/v1 API that knows ConfigMaps
// only: client-go's typed clientset would link every API group into the
// limiter.
func NewClient(cfg *rest.Config) (rest.Interface, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

// Decode reads and compiles the snapshot a ConfigMap holds: the document in
// data[config.DocumentKey], or gzip-compressed in
// binaryData[config.DocumentGzipKey]. When data[config.VersionKey] is there,
// it must be the document's version. Nothing is half-applied: any error
// means no snapshot.
func Decode(cm *corev1.ConfigMap) (*config.Snapshot, error) {
	doc, err := document(cm)
	if err != nil {
		return nil, err
	}
	snap, err := config.ParseDocument(doc)
	if err != nil {
		return nil, err
	}
	if want, ok := cm.Data[config.VersionKey]; ok && want != snap.Version {
		return nil, fmt.Errorf("data[%s] is %q but the document's version is %q", config.VersionKey, want, snap.Version)
	}
	return snap, nil
}

func document(cm *corev1.ConfigMap) ([]byte, error) {
	plain, hasPlain := cm.Data[config.DocumentKey]
	compressed, hasCompressed := cm.BinaryData[config.DocumentGzipKey]
	switch {
	case hasPlain && hasCompressed:
		return nil, fmt.Errorf("both data[%s] and binaryData[%s]: want one", config.DocumentKey, config.DocumentGzipKey)
	case hasPlain:
		return []byte(plain), nil
	case hasCompressed:
		doc, err := gunzip(compressed, MaxDocumentBytes)
		if err != nil {
			return nil, fmt.Errorf("binaryData[%s]: %w", config.DocumentGzipKey, err)
		}
		return doc, nil
	default:
		return nil, fmt.Errorf("neither data[%s] nor binaryData[%s]", config.DocumentKey, config.DocumentGzipKey)
	}
}

// gunzip decompresses b, failing beyond limit bytes.
func gunzip(b []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("gzip: decompresses to more than %d bytes", limit)
	}
	return out, nil
}

// Handler is told what Watch finds. Its funcs are called one at a time,
// never concurrently.
type Handler struct {
	// Load receives the ConfigMap's snapshot: the first, each one whose
	// version differs from the last one Load got, and the next one after
	// Invalid or Missing even when its version is unchanged, so that the
	// handler learns the ConfigMap is good again.
	Load func(*config.Snapshot)
	// Invalid receives why the ConfigMap holds no usable snapshot (see
	// Decode). The handler keeps what it has.
	Invalid func(error)
	// Missing is called when the ConfigMap doesn't exist: at start, once
	// the first list has answered, and whenever it is deleted.
	Missing func()
	// Unreachable receives a failed list or watch of the ConfigMap (the API
	// server is down, or RBAC forbids it). The informer retries with
	// backoff, and a watch that merely ends is not reported.
	Unreachable func(error)
}

// Watch loads the snapshot of ConfigMap cm and reloads it on every change
// until ctx ends, using client (see NewClient), through an informer that lists and watches that one
// object (field selector metadata.name), so that RBAC can grant get, list
// and watch on that resourceName alone. A change is handled as soon as the
// watch delivers it; nothing polls.
func Watch(ctx context.Context, client rest.Interface, cm Name, h Handler) error {
	lw := cache.NewFilteredListWatchFromClient(client, "configmaps", cm.Namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(metav1.ObjectNameField, cm.Name).String()
		})
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	w := &watcher{name: cm, h: h}
	if err := inf.SetWatchErrorHandlerWithContext(w.watchError); err != nil {
		return fmt.Errorf("watch ConfigMap %s: %w", cm, err)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c, ok := obj.(*corev1.ConfigMap); ok {
				w.update(c)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, _ := oldObj.(*corev1.ConfigMap)
			c, ok := newObj.(*corev1.ConfigMap)
			if ok && (o == nil || o.ResourceVersion != c.ResourceVersion) { // not a relist of the same object
				w.update(c)
			}
		},
		DeleteFunc: func(any) { w.deleted() },
	})
	if err != nil {
		return fmt.Errorf("watch ConfigMap %s: %w", cm, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	// Once the first list has been handled, no Add means no ConfigMap.
	if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		w.listed()
	}
	<-done
	return nil
}

// watcher serialises the informer's events and its watch errors, which
// arrive on different goroutines.
type watcher struct {
	name Name
	h    Handler

	mu      sync.Mutex
	seen    bool   // an event has been handled
	version string // passed to Load last; "" after Invalid or Missing
}

func (w *watcher) update(cm *corev1.ConfigMap) {
	snap, err := Decode(cm) // outside the lock: a large document takes a while
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = true
	if err != nil {
		w.version = ""
		w.h.Invalid(err)
		return
	}
	if snap.Version != w.version {
		w.version = snap.Version
		w.h.Load(snap)
	}
}

func (w *watcher) deleted() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = true
	w.version = ""
	w.h.Missing()
}

func (w *watcher) listed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen {
		w.seen = true
		w.h.Missing()
	}
}

func (w *watcher) watchError(_ context.Context, _ *cache.Reflector, err error) {
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return // a watch closing normally; the reflector goes on
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.h.Unreachable(err)
}
