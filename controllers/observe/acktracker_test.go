package observe

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// Start owns the pollers it runs: it returns only once each has returned,
// so no call to a limiter pod outlives it. (finished is read without a
// lock: if Start returned before the poller, -race reports it as well.)
func TestAckTrackerStartWaitsForPollers(t *testing.T) {
	rt := &heldCall{entered: make(chan struct{})}
	tr := NewAckTracker()
	tr.Client = &http.Client{Transport: rt}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Tracked before Start: the poller starts with Start.
	tr.Track(types.NamespacedName{Namespace: "ns", Name: "f"}, []string{"192.0.2.1:8080"}, "v1")
	returned := make(chan error, 1)
	go func() { returned <- tr.Start(ctx) }()
	<-rt.entered // the pod's poller is in its long poll
	cancel()
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	if !rt.finished {
		t.Fatal("Start returned while a poller's call to a pod was still running")
	}
	if eps := tr.Endpoints(); len(eps) != 0 {
		t.Errorf("still tracked after Start returned: %v", eps)
	}
}

// heldCall holds every call until its request's context ends.
type heldCall struct {
	entered  chan struct{}
	once     sync.Once
	finished bool
}

func (h *heldCall) RoundTrip(req *http.Request) (*http.Response, error) {
	h.once.Do(func() { close(h.entered) })
	<-req.Context().Done()
	h.finished = true
	return nil, req.Context().Err()
}
