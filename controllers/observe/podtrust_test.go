package observe

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// TestVerifyChain: a pod counts for a fleet only when its controller chain
// Pod→ReplicaSet→Deployment leads, UID by UID, to the fleet's Deployment,
// which the fleet controls, and the endpoint's address is the pod's.
func TestVerifyChain(t *testing.T) {
	fleet := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "edge", UID: "fleet-uid"}}
	ctrl := func(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
	}
	dep := func() *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "edge-limiter", UID: "dep-uid",
			OwnerReferences: ctrl("ratelimit.sluice.dev/v1alpha1", "LimiterFleet", "edge", "fleet-uid")}}
	}
	rs := func() *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "edge-limiter-5d9f", UID: "rs-uid",
			OwnerReferences: ctrl("apps/v1", "Deployment", "edge-limiter", "dep-uid")}}
	}
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "edge-limiter-5d9f-x", UID: "pod-uid",
			OwnerReferences: ctrl("apps/v1", "ReplicaSet", "edge-limiter-5d9f", "rs-uid")},
			Status: corev1.PodStatus{PodIP: "10.0.0.5", PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}, {IP: "fd00::5"}}}}
	}
	ref := func() *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: "Pod", Namespace: "sys", Name: "edge-limiter-5d9f-x", UID: "pod-uid"}
	}
	for _, tc := range []struct {
		name   string
		change func(*appsv1.Deployment, *appsv1.ReplicaSet, *corev1.Pod, *corev1.ObjectReference, *string) (*appsv1.Deployment, *appsv1.ReplicaSet)
		errSub string
	}{
		{name: "the fleet's own pod"},
		{name: "its other address", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, host *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			*host = "fd00::5"
			return d, r
		}},
		{name: "a rogue pod without owners", errSub: "no controller", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, p *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			p.OwnerReferences = nil
			return d, r
		}},
		{name: "a ReplicaSet that is not found", errSub: "not controlled by a ReplicaSet", change: func(d *appsv1.Deployment, _ *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			return d, nil
		}},
		{name: "a ReplicaSet of the same name, another UID", errSub: "not controlled by a ReplicaSet", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			r.UID = "other"
			return d, r
		}},
		{name: "a rogue ReplicaSet with no owner", errSub: "not controlled by Deployment", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			r.OwnerReferences = nil
			return d, r
		}},
		{name: "a ReplicaSet of another Deployment", errSub: "not controlled by Deployment", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			r.OwnerReferences = ctrl("apps/v1", "Deployment", "edge-limiter", "other-dep")
			return d, r
		}},
		{name: "a non-controller owner", errSub: "no controller", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, p *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			p.OwnerReferences[0].Controller = nil
			return d, r
		}},
		{name: "a Deployment the fleet does not control", errSub: "Deployment edge-limiter is not controlled by the fleet", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			d.OwnerReferences = nil
			return d, r
		}},
		{name: "a Deployment the fleet controls under v1beta1", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			d.OwnerReferences = ctrl("ratelimit.sluice.dev/v1beta1", "LimiterFleet", "edge", "fleet-uid")
			return d, r
		}},
		{name: "a Deployment controlled by a LimiterFleet of another group", errSub: "not controlled by the fleet", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			d.OwnerReferences = ctrl("ratelimit.example.com/v1beta1", "LimiterFleet", "edge", "fleet-uid")
			return d, r
		}},
		{name: "no Deployment yet", errSub: "no Deployment", change: func(_ *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			return nil, r
		}},
		{name: "the endpoint names another pod", errSub: "not the one the endpoint names", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, ref *corev1.ObjectReference, _ *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			ref.UID = "earlier-pod"
			return d, r
		}},
		{name: "an address that is not the pod's", errSub: "does not have the endpoint's address", change: func(d *appsv1.Deployment, r *appsv1.ReplicaSet, _ *corev1.Pod, _ *corev1.ObjectReference, host *string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
			*host = "10.0.0.6"
			return d, r
		}},
	} {
		d, r, p, ref, host := dep(), rs(), pod(), ref(), "10.0.0.5"
		if tc.change != nil {
			d, r = tc.change(d, r, p, ref, &host)
		}
		err := verifyChain(fleet, d, r, p, ref, host)
		switch {
		case tc.errSub == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.errSub != "" && (err == nil || !strings.Contains(err.Error(), tc.errSub)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.errSub)
		}
	}
}

// TestPodAnswersAreBounded: the tracker and the collector read at most
// 1 MiB of a pod's answer, and say so when it is larger; a 1 MiB answer is
// read whole.
func TestPodAnswersAreBounded(t *testing.T) {
	pad := func(n int) string {
		// A JSON answer of exactly n bytes.
		prefix, suffix := `{"bootID":"b","version":"v","x":"`, `"}`
		return prefix + strings.Repeat("a", n-len(prefix)-len(suffix)) + suffix
	}
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(body.Load().(string)))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tr := NewAckTracker()
	tr.Client = noRedirects(srv.Client())
	c := &Collector{HTTP: srv.Client()}
	c.defaults()
	ctx := context.Background()

	body.Store(pad(maxAnswerBytes))
	if _, err := tr.ask(ctx, types.NamespacedName{}, addr, ""); err != nil {
		t.Errorf("a 1 MiB snapshot answer: %v", err)
	}
	if _, err := c.read(ctx, types.NamespacedName{}, addr); err != nil {
		t.Errorf("a 1 MiB stats answer: %v", err)
	}
	body.Store(pad(maxAnswerBytes + 1))
	if _, err := tr.ask(ctx, types.NamespacedName{}, addr, ""); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("a snapshot answer over 1 MiB: %v", err)
	}
	if _, err := c.read(ctx, types.NamespacedName{}, addr); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("a stats answer over 1 MiB: %v", err)
	}
}

// TestPodRedirectsAreNotFollowed: a pod that answers with a redirect (to
// a place the operator can reach and the pod can't, say) is refused, and
// the target is never called, even with the client given in Options.
func TestPodRedirectsAreNotFollowed(t *testing.T) {
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		followed.Add(1)
		_ = json.NewEncoder(w).Encode(limiterwire.Stats{BootID: "target"})
	}))
	defer target.Close()
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusFound)
	}))
	defer pod.Close()
	addr := strings.TrimPrefix(pod.URL, "http://")

	tr := NewAckTracker()
	tr.Client = &http.Client{} // as Options.AckClient may be: following redirects
	ctx, cancel := context.WithCancel(context.Background())
	fleet := types.NamespacedName{Namespace: "ns", Name: "f"}
	tr.Serve(fleet, map[string]string{})
	tr.Track(fleet, []string{addr}, "v1")
	done := make(chan error, 1)
	go func() { done <- tr.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		acks, complete := tr.Acks(fleet)
		if complete && len(acks) == 1 {
			if !strings.Contains(acks[0].Err, "302") {
				t.Errorf("the redirecting pod's ack: %+v", acks[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pod's answer never came")
		}
		time.Sleep(10 * time.Millisecond) // polling the tracker's goroutine
	}
	cancel()
	<-done

	c := &Collector{HTTP: &http.Client{}}
	c.defaults()
	if _, err := c.read(context.Background(), types.NamespacedName{}, addr); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("the collector read a redirecting pod: %v", err)
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect target was called %d times", n)
	}
}

// TestPodReportsOnlyItsFleetsPolicies: what a pod says about policies its
// fleet does not serve is dropped: counts, hottest values and overshoot
// bounds by the collector, generations and degraded policies by the
// tracker. Strings are bounded.
func TestPodReportsOnlyItsFleetsPolicies(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &Collector{Window: 5 * time.Minute, MinWrite: time.Second, now: func() time.Time { return now }}
	c.defaults()
	c.unread = map[types.NamespacedName][]string{}
	c.hot = map[types.UID]*hotSum{}
	c.bounds = map[types.UID]int64{}
	since := now.Add(-time.Minute)
	st := &limiterwire.Stats{BootID: "b", StartedAt: now.Add(-time.Minute), Policies: []limiterwire.PolicyStats{
		{UID: "mine", Allowed: 5, HottestSince: &since, Hottest: []limiterwire.HotValue{{Value: strings.Repeat("v", 5000), Requests: 5}}},
		{UID: "theirs", Allowed: 1000, Limited: 1000, HottestSince: &since, Hottest: []limiterwire.HotValue{{Value: "x", Requests: 9}},
			LocalTier: &limiterwire.LocalTier{OvershootBound: 77}},
	}}
	c.record(now, "10.0.0.5:8080", st, map[string]string{"mine": "a/mine"})
	pols := []v1beta1.RateLimitPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "mine", UID: "mine"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "theirs", UID: "theirs"}},
	}
	written := map[string]*v1beta1.EnforcementStatus{}
	if err := c.writeEach(context.Background(), now, pols, func(_ context.Context, p *v1beta1.RateLimitPolicy, e *v1beta1.EnforcementStatus) error {
		written[p.Name] = e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if e := written["mine"]; e == nil || *e.Allowed != 5 || len(e.Hottest) != 1 || len(e.Hottest[0].Value) > maxHotValue {
		t.Errorf("the served policy's status: %+v", e)
	}
	if e := written["theirs"]; e != nil {
		t.Errorf("a policy the fleet does not serve got status.enforcement %+v", e)
	}

	if got := degradedOf([]limiterwire.Degraded{{Policy: "a/mine", FailureMode: "Open"}, {Policy: "b/theirs", FailureMode: "Closed"}},
		map[string]string{"mine": "a/mine"}); len(got) != 1 || got["a/mine"] != "Open" {
		t.Errorf("degraded %v, want a/mine alone", got)
	}
}

func TestBoundMessage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789abc", 10, "0123456…"},
		{"ééééé", 8, "éé…"}, // never half a rune
		{"bad\xffbyte", 20, "badbyte"},
	} {
		got := boundMessage(tc.in, tc.n)
		if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("boundMessage(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestAckTrackerNotifiesWhenServedPoliciesArrive: a pod's answer read
// before the fleet served a policy lacks it; once the fleet serves it,
// the pod's next answer holds it and the controllers hear of it, though
// the pod's version did not change.
func TestAckTrackerNotifiesWhenServedPoliciesArrive(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(limiterwire.Snapshot{Version: "v2", Enforcement: "Enabled",
			Policies: []limiterwire.Policy{{Namespace: "ns", Name: "p", UID: "uid-p", Generation: 3}}})
	}))
	defer srv.Close()
	tr := NewAckTracker()
	tr.Recheck = 20 * time.Millisecond
	events := tr.Subscribe()
	fleet := types.NamespacedName{Namespace: "ns", Name: "f"}
	tr.Serve(fleet, map[string]string{})
	tr.Track(fleet, []string{strings.TrimPrefix(srv.URL, "http://")}, "v2")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	<-events // the first answer
	if acks, _ := tr.Acks(fleet); len(acks) != 1 || len(acks[0].Generations) != 0 {
		t.Fatalf("before the fleet serves p: %+v", acks)
	}
	tr.Serve(fleet, map[string]string{"uid-p": "ns/p"})
	select {
	case <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("no event once the pod's answer holds a served policy")
	}
	if acks, _ := tr.Acks(fleet); len(acks) != 1 || acks[0].Generations["uid-p"] != 3 {
		t.Fatalf("after: %+v", acks)
	}
}
