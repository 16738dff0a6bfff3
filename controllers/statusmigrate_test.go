package controllers

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// TestSplitStatusFields: an old manager's status fields go to the writers
// that own them now, by field and by condition type; what none claims (an
// unknown condition, the status and conditions nodes themselves) to the
// fleet controller; what lies outside the status stays.
func TestSplitStatusFields(t *testing.T) {
	cond := func(typ string) string {
		return `"k:{\"type\":\"` + typ + `\"}":{".":{},"f:status":{},"f:type":{}}`
	}
	for _, tc := range []struct {
		name string
		in   string
		want map[string]string
		rest string
	}{
		{"snapshot and limiters", `{"f:status":{"f:snapshot":{"f:refused":{},"f:compressed":{}},"f:limiters":{"f:ready":{}}}}`,
			map[string]string{FleetStatusFieldOwner: `{"f:status":{"f:limiters":{"f:ready":{}},"f:snapshot":{"f:compressed":{},"f:refused":{}}}}`}, ""},
		{"conditions by type", `{"f:status":{".":{},"f:conditions":{".":{},` + cond("Ready") + `,` + cond("RedisDataLoss") + `,` +
			cond("AdminTLSReady") + `,` + cond("RegionsReachable") + `,` + cond("Degraded") + `}}}`,
			map[string]string{
				FleetStatusFieldOwner:    `{"f:status":{".":{},"f:conditions":{".":{},` + cond("Degraded") + `,` + cond("Ready") + `}}}`,
				RedisStatusFieldOwner:    `{"f:status":{"f:conditions":{` + cond("RedisDataLoss") + `}}}`,
				AdminTLSStatusFieldOwner: `{"f:status":{"f:conditions":{` + cond("AdminTLSReady") + `}}}`,
				EnforcementFieldOwner:    `{"f:status":{"f:conditions":{` + cond("RegionsReachable") + `}}}`,
			}, ""},
		{"redis, regions, observedGeneration", `{"f:status":{"f:observedGeneration":{},"f:redis":{".":{},"f:clusterState":{},"f:slotsAssigned":{}},"f:regions":{}}}`,
			map[string]string{
				FleetStatusFieldOwner: `{"f:status":{"f:observedGeneration":{}}}`,
				RedisStatusFieldOwner: `{"f:status":{"f:redis":{".":{},"f:clusterState":{},"f:slotsAssigned":{}}}}`,
				EnforcementFieldOwner: `{"f:status":{"f:regions":{}}}`,
			}, ""},
		{"a field this release has not", `{"f:status":{"f:gone":{"f:x":{}}}}`,
			map[string]string{FleetStatusFieldOwner: `{"f:status":{"f:gone":{"f:x":{}}}}`}, ""},
		{"outside the status", `{"f:metadata":{"f:annotations":{"f:a":{}}},"f:status":{"f:snapshot":{"f:refused":{}}}}`,
			map[string]string{FleetStatusFieldOwner: `{"f:status":{"f:snapshot":{"f:refused":{}}}}`}, `{"f:metadata":{"f:annotations":{"f:a":{}}}}`},
	} {
		parts, rest, err := splitStatusFields([]byte(tc.in), fleetStatusOwners)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := map[string]string{}
		for owner, s := range parts {
			raw, err := s.ToJSON()
			if err != nil {
				t.Fatal(err)
			}
			got[owner] = string(raw)
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: parts\n%v\nwant\n%v", tc.name, got, tc.want)
		}
		var restJSON string
		if rest != nil {
			raw, _ := rest.ToJSON()
			restJSON = string(raw)
		}
		if restJSON != tc.rest {
			t.Errorf("%s: rest %s, want %s", tc.name, restJSON, tc.rest)
		}
	}
}

// TestSplitPolicyStatusFields: a policy's enforcement is the collector's,
// the rest the policy controller's.
func TestSplitPolicyStatusFields(t *testing.T) {
	parts, rest, err := splitStatusFields([]byte(`{"f:status":{"f:enforcement":{"f:allowed":{}},"f:fleets":{},`+
		`"f:conditions":{"k:{\"type\":\"Accepted\"}":{"f:status":{}}}}}`), policyStatusOwners)
	if err != nil || rest != nil || len(parts) != 2 {
		t.Fatalf("parts %v, rest %v, %v", parts, rest, err)
	}
	for owner, want := range map[string]string{
		EnforcementFieldOwner:  `{"f:status":{"f:enforcement":{"f:allowed":{}}}}`,
		PolicyStatusFieldOwner: `{"f:status":{"f:conditions":{"k:{\"type\":\"Accepted\"}":{"f:status":{}}},"f:fleets":{}}}`,
	} {
		if raw, _ := parts[owner].ToJSON(); string(raw) != want {
			t.Errorf("%s: %s, want %s", owner, raw, want)
		}
	}
}

// TestFleetStatusFieldsNameTheirJSON: fleetStatusFields' names are the JSON
// names of the fields their copies set, and name every field but
// conditions, so a field's owner is the same by path as by Go field.
func TestFleetStatusFieldsNameTheirJSON(t *testing.T) {
	full := &v1beta1.LimiterFleetStatus{ObservedGeneration: 1, Snapshot: &v1beta1.SnapshotStatus{}, Limiters: &v1beta1.LimitersStatus{},
		Redis: &v1beta1.RedisStatus{}, Regions: []v1beta1.RegionStatus{{Name: "eu"}}, Conditions: []metav1.Condition{{Type: "X"}}}
	var names []string
	for _, f := range fleetStatusFields {
		one := &v1beta1.LimiterFleetStatus{}
		f.copy(one, full)
		raw, _ := json.Marshal(one)
		var keys map[string]any
		_ = json.Unmarshal(raw, &keys)
		if len(keys) != 1 || keys[f.name] == nil {
			t.Errorf("field %s copies %s", f.name, raw)
		}
		names = append(names, f.name)
	}
	raw, _ := json.Marshal(full)
	var all map[string]any
	_ = json.Unmarshal(raw, &all)
	delete(all, "conditions")
	if got := slices.Sorted(maps.Keys(all)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Errorf("status fields %v, fleetStatusFields names %v", got, names)
	}
}

// TestMigrateStatusOwners: the old entry goes, its parts join the writers'
// Apply entries of the status (one made when missing, with the old entry's
// apiVersion), and entries of other subresources and operations stay.
func TestMigrateStatusOwners(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, sub, apiVersion, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: sub, APIVersion: apiVersion,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	const alpha, beta = "ratelimit.sluice.dev/v1alpha1", "ratelimit.sluice.dev/v1beta1"
	spec := entry("kubectl", metav1.ManagedFieldsOperationApply, "", alpha, `{"f:spec":{"f:replicas":{}}}`)
	in := []metav1.ManagedFieldsEntry{
		spec,
		entry("operator", metav1.ManagedFieldsOperationUpdate, "status", alpha,
			`{"f:status":{"f:conditions":{"k:{\"type\":\"RedisDataLoss\"}":{"f:status":{}}},"f:snapshot":{"f:refused":{}}}}`),
		entry(FleetStatusFieldOwner, metav1.ManagedFieldsOperationApply, "status", beta, `{"f:status":{"f:snapshot":{"f:version":{}}}}`),
	}
	if _, changed, err := migrateStatusOwners(in[:1], fleetStatusOwners); changed || err != nil {
		t.Errorf("no old entry: changed %v, %v", changed, err)
	}
	out, changed, err := migrateStatusOwners(in, fleetStatusOwners)
	if err != nil || !changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	got := map[string]string{}
	for _, e := range out {
		got[e.Manager+" "+string(e.Operation)+" "+e.Subresource+" "+e.APIVersion] = string(e.FieldsV1.Raw)
	}
	want := map[string]string{
		"kubectl Apply  " + alpha:                        `{"f:spec":{"f:replicas":{}}}`,
		FleetStatusFieldOwner + " Apply status " + beta:  `{"f:status":{"f:snapshot":{"f:refused":{},"f:version":{}}}}`,
		RedisStatusFieldOwner + " Apply status " + alpha: `{"f:status":{"f:conditions":{"k:{\"type\":\"RedisDataLoss\"}":{"f:status":{}}}}}`,
	}
	if !maps.Equal(got, want) {
		t.Errorf("entries\n%v\nwant\n%v", got, want)
	}
	if string(in[2].FieldsV1.Raw) != `{"f:status":{"f:snapshot":{"f:version":{}}}}` {
		t.Errorf("the input changed: %s", in[2].FieldsV1.Raw)
	}
}
