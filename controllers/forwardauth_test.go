package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// A fleet's spec.forwardAuth reaches its limiter pods through the snapshot:
// the pod serves the mapping, and a change to it is served without a
// restart.
func TestFleetForwardAuth(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "forward-auth", "edge", 1)
	p := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "forward-auth", Name: "per-key", Labels: map[string]string{"fleet": "edge"}},
		Spec: v1alpha1.RateLimitPolicySpec{Domain: "edge", Descriptors: []v1alpha1.Descriptor{{Key: "api_key"}},
			Rate: v1alpha1.Rate{Limit: 1, Period: metav1.Duration{Duration: time.Minute}}},
	}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	setForwardAuth := func(status int32) {
		t.Helper()
		f := &v1alpha1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), f); err != nil {
			t.Fatal(err)
		}
		// A merge patch: the operator writes the fleet's status meanwhile.
		orig := f.DeepCopy()
		f.Spec.ForwardAuth = []v1alpha1.ForwardAuth{{Domain: "edge", DenyStatus: ptr.To(status),
			Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "api_key", From: v1alpha1.FromHeader, Header: ptr.To("X-Api-Key")}}}}
		if err := k8s.Patch(ctx, f, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	call := func() (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+pods[0].httpAddr+"/v1/forward-auth/edge", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-RateLimit-Limit")
	}
	setForwardAuth(403)
	eventually(t, 30*time.Second, "the mapping served with the policy", func() error {
		if code, limit := call(); code != http.StatusOK || limit != "1" {
			return fmt.Errorf("first call: %d, X-RateLimit-Limit %q", code, limit)
		}
		return nil
	})
	if code, _ := call(); code != http.StatusForbidden {
		t.Fatalf("over the limit: %d, want the fleet's denyStatus 403", code)
	}
	setForwardAuth(429)
	eventually(t, 30*time.Second, "the new denyStatus served", func() error {
		if code, _ := call(); code != http.StatusTooManyRequests {
			return fmt.Errorf("over the limit: %d, want 429", code)
		}
		return nil
	})
}
