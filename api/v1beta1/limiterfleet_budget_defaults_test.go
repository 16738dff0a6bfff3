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

package v1beta1_test

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// EffectiveBudget takes each field from the namespace's override, else the
// fleet's, else the default.
func TestEffectiveBudget(t *testing.T) {
	spec := &v1beta1.LimiterFleetSpec{TenantBudget: &v1beta1.TenantBudgets{
		TenantBudget: v1beta1.TenantBudget{MaxPoliciesPerNamespace: ptr.To(int32(50))},
		Overrides: []v1beta1.TenantBudgetOverride{{Namespace: "payments",
			TenantBudget: v1beta1.TenantBudget{MaxPoliciesPerRequest: ptr.To(int32(64))}}},
	}}
	got := func(b v1beta1.TenantBudget) [4]int32 {
		return [4]int32{*b.MaxPoliciesPerNamespace, *b.MaxSnapshotBytesPerNamespace, *b.MaxPoliciesPerRequest, *b.StoreCallsPerSecondPerNamespace}
	}
	if g, want := got(spec.EffectiveBudget("payments")), [4]int32{50, v1beta1.DefaultMaxSnapshotBytesPerNamespace, 64, v1beta1.DefaultStoreCallsPerSecondPerNamespace}; g != want {
		t.Errorf("payments: %v, want %v", g, want)
	}
	if g, want := got(spec.EffectiveBudget("shop")), [4]int32{50, v1beta1.DefaultMaxSnapshotBytesPerNamespace, v1beta1.DefaultMaxPoliciesPerRequest, v1beta1.DefaultStoreCallsPerSecondPerNamespace}; g != want {
		t.Errorf("shop: %v, want %v", g, want)
	}
	none := &v1beta1.LimiterFleetSpec{}
	if g, want := got(none.EffectiveBudget("shop")), [4]int32{v1beta1.DefaultMaxPoliciesPerNamespace, v1beta1.DefaultMaxSnapshotBytesPerNamespace, v1beta1.DefaultMaxPoliciesPerRequest, v1beta1.DefaultStoreCallsPerSecondPerNamespace}; g != want {
		t.Errorf("no tenantBudget: %v, want %v", g, want)
	}
}
