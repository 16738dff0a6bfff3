package v1alpha1_test

import (
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// The rules of spec.entries, run by TestFleetCRDRejects and
// TestFleetCRDAccepts with the others: one case per rule's message.
func init() {
	fleetBadCases = append(fleetBadCases, entriesBadCases...)
	fleetGoodCases = append(fleetGoodCases, entriesGoodCases...)
}

var entriesBadCases = []fleetBadCase{
	{
		name: "entries: lease and idempotency the same",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Entries = &v1alpha1.FleetEntries{Lease: ptr.To("x"), Idempotency: ptr.To("x")}
		},
		field:   "spec.entries",
		message: "spec.entries.lease and spec.entries.idempotency must differ",
	},
	{
		name: "entries: priority the lease entry",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Entries = &v1alpha1.FleetEntries{Lease: ptr.To("x"), Priority: ptr.To("x")}
		},
		field:   "spec.entries",
		message: "spec.entries.priority must differ from spec.entries.lease and spec.entries.idempotency",
	},
	{
		name: "entries: priority the idempotency entry",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Entries = &v1alpha1.FleetEntries{Idempotency: ptr.To("x"), Priority: ptr.To("x")}
		},
		field:   "spec.entries",
		message: "spec.entries.priority must differ from spec.entries.lease and spec.entries.idempotency",
	},
	{
		name: "entries: accept the default idempotency entry",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Entries = &v1alpha1.FleetEntries{Accept: ptr.To("idempotency_key")}
		},
		field:   "spec.entries",
		message: "spec.entries.accept must differ from spec.entries.lease, spec.entries.idempotency and spec.entries.priority",
	},
	{
		name: "entries: accept the priority entry",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Entries = &v1alpha1.FleetEntries{Priority: ptr.To("x"), Accept: ptr.To("x")}
		},
		field:   "spec.entries",
		message: "spec.entries.accept must differ from spec.entries.lease, spec.entries.idempotency and spec.entries.priority",
	},
	{
		name:    "entries: an empty lease entry",
		typed:   func(f *v1alpha1.LimiterFleet) { f.Spec.Entries = &v1alpha1.FleetEntries{Lease: ptr.To("")} },
		field:   "spec.entries.lease",
		message: "should be at least 1 chars long",
	},
}

var entriesGoodCases = []fleetGoodCase{
	{
		name: "entries: all three, distinct",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Entries = &v1alpha1.FleetEntries{Lease: ptr.To("sluice_lease"), Idempotency: ptr.To("idempotency_key"), Priority: ptr.To("priority")}
		},
	},
	{
		name: "entries: all four, distinct",
		typed: func(f *v1alpha1.LimiterFleet) {
			f.Spec.Entries = &v1alpha1.FleetEntries{Lease: ptr.To("sluice_lease"), Idempotency: ptr.To("idem"), Priority: ptr.To("priority"), Accept: ptr.To("accept")}
		},
	},
	{
		name:  "entries: priority only",
		typed: func(f *v1alpha1.LimiterFleet) { f.Spec.Entries = &v1alpha1.FleetEntries{Priority: ptr.To("priority")} },
	},
}
