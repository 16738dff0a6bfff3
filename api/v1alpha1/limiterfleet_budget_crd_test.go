package v1alpha1_test

import (
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// The rules of spec.tenantBudget, run by TestFleetCRDRejects and
// TestFleetCRDAccepts with the others.
func init() {
	fleetBadCases = append(fleetBadCases, budgetBadCases...)
	fleetGoodCases = append(fleetGoodCases, budgetGoodCases...)
}

var budgetBadCases = []fleetBadCase{
	{
		name: "tenantBudget: an override of a bad namespace name",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.TenantBudget = &v1alpha1.TenantBudgets{Overrides: []v1alpha1.TenantBudgetOverride{{Namespace: "Team_A"}}}
		},
		field:   "spec.tenantBudget.overrides[0].namespace",
		message: "spec.tenantBudget.overrides[].namespace must be a namespace name",
	},
	{
		name: "tenantBudget: the same namespace twice",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.TenantBudget = &v1alpha1.TenantBudgets{Overrides: []v1alpha1.TenantBudgetOverride{{Namespace: "a"}, {Namespace: "a"}}}
		},
		field:   "spec.tenantBudget.overrides[1]",
		message: "Duplicate value",
	},
	{
		name: "tenantBudget: snapshot bytes below 1024",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.TenantBudget = &v1alpha1.TenantBudgets{TenantBudget: v1alpha1.TenantBudget{MaxSnapshotBytesPerNamespace: ptr.To(int32(100))}}
		},
		field:   "spec.tenantBudget.maxSnapshotBytesPerNamespace",
		message: "should be greater than or equal to 1024",
	},
	{
		name: "tenantBudget: no policy per request",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.TenantBudget = &v1alpha1.TenantBudgets{Overrides: []v1alpha1.TenantBudgetOverride{{Namespace: "a",
				TenantBudget: v1alpha1.TenantBudget{MaxPoliciesPerRequest: ptr.To(int32(0))}}}}
		},
		field:   "spec.tenantBudget.overrides[0].maxPoliciesPerRequest",
		message: "should be greater than or equal to 1",
	},
	{
		name: "tenantBudget: store calls above 1000000",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.TenantBudget = &v1alpha1.TenantBudgets{TenantBudget: v1alpha1.TenantBudget{StoreCallsPerSecondPerNamespace: ptr.To(int32(2_000_000))}}
		},
		field:   "spec.tenantBudget.storeCallsPerSecondPerNamespace",
		message: "should be less than or equal to 1000000",
	},
}

var budgetGoodCases = []fleetGoodCase{
	{name: "tenantBudget with an override", typed: func(f *v1alpha1.LimiterFleet) {
		f.Spec.TenantBudget = &v1alpha1.TenantBudgets{
			TenantBudget: v1alpha1.TenantBudget{MaxPoliciesPerNamespace: ptr.To(int32(50)), StoreCallsPerSecondPerNamespace: ptr.To(int32(1000))},
			Overrides: []v1alpha1.TenantBudgetOverride{{Namespace: "payments",
				TenantBudget: v1alpha1.TenantBudget{MaxSnapshotBytesPerNamespace: ptr.To(int32(512 << 10)), MaxPoliciesPerRequest: ptr.To(int32(64))}}},
		}
	}},
}
