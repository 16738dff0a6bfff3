/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/conversiontest"
)

// TestOperatorWithWebhookDown: with the CRDs' conversion webhook down (the
// CRDs still name it, nothing listens there), the operator starts and
// reconciles stored v1beta1 fleets and policies, for it reads and writes
// v1beta1 only: it builds the fleet's workload, writes the snapshot with
// the policy in it, which a real limiter process loads and enforces, and
// writes both statuses. A v1alpha1 read of the same policy fails on the
// conversion, which shows the webhook was down all along.
func TestOperatorWithWebhookDown(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	stopOperator()
	stopConversion()
	t.Cleanup(func() { // last: the rest of the suite needs both
		stopOperator()
		var err error
		if stopConversion, err = conversiontest.Serve(testEnv); err != nil {
			t.Errorf("restarting the conversion webhook: %v", err)
		}
		if err := startOperator(); err != nil {
			t.Errorf("restarting the operator: %v", err)
		}
	})
	if err := startOperator(); err != nil {
		t.Fatalf("starting the operator with the webhook down: %v", err)
	}

	ns := namespace(t, "webhook-down")
	selected := map[string]string{"sluice-test": "webhook-down"}
	fleet := &v1beta1.LimiterFleet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"},
		Spec: v1beta1.LimiterFleetSpec{Limiters: v1beta1.FleetLimiters{Replicas: ptr.To[int32](1)},
			Policies: &v1beta1.PolicySelection{Selector: &metav1.LabelSelector{MatchLabels: selected}}}}
	if err := k8s.Create(ctx, fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8s.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, client.InNamespace(ns),
			client.MatchingLabels{discoveryv1.LabelServiceName: resources.LimiterName(fleet)})
		if err := k8s.Delete(ctx, fleet); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting fleet %s/%s: %v", ns, fleet.Name, err)
		}
		collectGarbage(t, ns)
	})
	policy := &v1beta1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "per-user", Labels: selected},
		Spec: v1beta1.RateLimitPolicySpec{Domain: "webhook-down", Descriptors: []v1beta1.Descriptor{{Key: "user_id"}},
			Limit: v1beta1.Limit{Type: v1beta1.LimitRate, Rate: &v1beta1.RateLimit{Limit: 2, Period: ptr.To[v1beta1.Duration]("1h")}}}}
	if err := k8s.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, policy) })

	// The fleet's workload is built.
	eventually(t, time.Minute, "the fleet's limiter Deployment and Service", func() error {
		key := client.ObjectKey{Namespace: ns, Name: resources.LimiterName(fleet)}
		if err := k8s.Get(ctx, key, &appsv1.Deployment{}); err != nil {
			return err
		}
		return k8s.Get(ctx, key, &corev1.Service{})
	})
	// The snapshot holds the policy, in the ConfigMap the status names.
	eventually(t, time.Minute, "the snapshot with the policy", func() error {
		got := &v1beta1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), got); err != nil {
			return err
		}
		if s := got.Status.Snapshot; s == nil || s.Policies != 1 || s.ConfigMapName != resources.SnapshotConfigMapName(fleet) {
			return fmt.Errorf("status.snapshot %+v, want 1 policy in %s", s, resources.SnapshotConfigMapName(fleet))
		}
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.SnapshotConfigMapName(fleet)}, &corev1.ConfigMap{})
	})

	// A real limiter loads it and enforces the limit: 2 an hour.
	standIn := &v1alpha1.LimiterFleet{ObjectMeta: fleet.ObjectMeta} // the suite's helpers name objects from it
	pods := fleetPods(t, standIn, 1)
	eventually(t, time.Minute, "the limiter enforces the policy", func() error {
		if code := pods[0].check(t, "webhook-down", "user_id", "probe"); code != http.StatusOK {
			return fmt.Errorf("the first request answered %d", code)
		}
		if code := pods[0].check(t, "webhook-down", "user_id", "probe"); code != http.StatusOK {
			return fmt.Errorf("the second request answered %d", code)
		}
		if code := pods[0].check(t, "webhook-down", "user_id", "probe"); code != http.StatusTooManyRequests {
			return fmt.Errorf("the third request answered %d, want 429 (the limiter has not loaded the policy yet, or counts otherwise)", code)
		}
		return nil
	})

	// Both statuses are written, in v1beta1.
	eventually(t, time.Minute, "the policy Accepted and Enforced", func() error {
		got := &v1beta1.RateLimitPolicy{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
			return err
		}
		for _, typ := range []string{v1beta1.AcceptedCondition, v1beta1.EnforcedCondition} {
			if c := condition(got.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("condition %s is %+v; conditions %+v", typ, c, got.Status.Conditions)
			}
		}
		return nil
	})
	eventually(t, time.Minute, "the fleet Ready", func() error {
		got := &v1beta1.LimiterFleet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fleet), got); err != nil {
			return err
		}
		if c := condition(got.Status.Conditions, v1beta1.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready is %+v; conditions %+v", c, got.Status.Conditions)
		}
		return nil
	})

	// The webhook was down: a v1alpha1 client can't read the policy.
	err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), &v1alpha1.RateLimitPolicy{})
	if err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Fatalf("a v1alpha1 Get with the webhook down: %v, want a conversion webhook error", err)
	}
}
