package convert_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// A v1alpha1 policy converts to v1beta1 with ConvertTo; what v1beta1
// leaves to the fleet comes back as entries, and what only v1beta1 says
// (a scope Global its conversion annotation carries) lands in the spec.
// No conversion annotation leaves the package.
func TestPolicy(t *testing.T) {
	js := `{"apiVersion":"ratelimit.sluice.dev/v1alpha1","kind":"RateLimitPolicy",
	"metadata":{"name":"in-flight","namespace":"shop"},
	"spec":{"domain":"uploads","descriptors":[{"key":"tenant"}],"algorithm":"Concurrency",
	"concurrency":{"maxInFlight":4,"leaseEntry":"upload_lease"},
	"priority":{"key":"tier","levels":[{"value":"gold","share":100}],"default":"gold"}}}`
	b, e, err := convert.DecodePolicy([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if b.Spec.Limit.Type != v1beta1.LimitConcurrency || b.Spec.Limit.Concurrency.MaxInFlight != 4 || b.Spec.Limit.Concurrency.Priority == nil {
		t.Errorf("spec %+v", b.Spec)
	}
	if e == nil || e.Lease == nil || *e.Lease != "upload_lease" || e.Priority == nil || *e.Priority != "tier" {
		t.Errorf("entries %+v, want lease upload_lease and priority tier", e)
	}
	if len(b.Annotations) != 0 {
		t.Errorf("annotations %v left the API package", b.Annotations)
	}

	var global v1alpha1.RateLimitPolicy
	global.Name, global.Namespace = "global", "edge"
	global.Spec.Domain, global.Spec.Descriptors = "edge", []v1alpha1.Descriptor{{Key: "country"}}
	global.Spec.Rate.Limit, global.Spec.Rate.Period.Duration = 50, 1e9
	global.Annotations = map[string]string{v1alpha1.V1beta1SpecAnnotation: `{"domain":"edge","descriptors":[{"key":"country"}],"limit":{"type":"Rate","rate":{"limit":50,"period":"1s","scope":"Global"}}}`}
	b, e, err = convert.Policy(&global)
	if err != nil || e != nil || b.Spec.Limit.Rate.Scope == nil || *b.Spec.Limit.Rate.Scope != v1beta1.ScopeGlobal || len(b.Annotations) != 0 {
		t.Errorf("global: %+v %+v %v %v", b.Spec.Limit.Rate, e, b.Annotations, err)
	}
}

// What the v1alpha1 CRD refuses and the conversion would drop without a
// word is refused, and a strict decode names the unknown field.
func TestPolicyRefuses(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{`"algorithm":"Concurrency","concurrency":{"maxInFlight":4},"rate":{"limit":1,"period":"1s"}`, "do not apply to algorithm Concurrency"},
		{`"concurrency":{"maxInFlight":4},"rate":{"limit":1,"period":"1s"}`, "spec.concurrency is required with algorithm Concurrency, and only with it"},
		{`"rate":{"limit":1,"period":"1s"},"soft":true,"shadow":true`, "spec.soft and spec.shadow are exclusive"},
		{`"rate":{"limit":1,"period":"1s","timeZone":"UTC"}`, "spec.rate.timeZone applies only with spec.rate.calendar"},
		{`"rate":{"limit":1,"period":"1s"},"brust":3`, `unknown field "spec.brust"`},
	} {
		js := `{"metadata":{"name":"p","namespace":"n"},"spec":{"domain":"d","descriptors":[{"key":"k"}],` + tc.spec + `}}`
		b, _, err := convert.DecodePolicy([]byte(js))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.spec, err, tc.want)
		}
		if err != nil && b.Name != "p" {
			t.Errorf("%s: the refused policy is not named: %+v", tc.spec, b.ObjectMeta)
		}
	}
}

// StoredPolicy reads a policy as the API server stores it, in v1beta1:
// the spec as stored, and the lease entry and priority key a v1alpha1
// client wrote, from the stored annotation, as DecodePolicy returns them
// from the v1alpha1 manifest; a v1beta1 policy names none, and a forged
// annotation that does not say the stored spec is not believed.
func TestStoredPolicy(t *testing.T) {
	js := `{"apiVersion":"ratelimit.sluice.dev/v1alpha1","kind":"RateLimitPolicy",
	"metadata":{"name":"in-flight","namespace":"shop"},
	"spec":{"domain":"uploads","descriptors":[{"key":"tenant"}],"algorithm":"Concurrency",
	"concurrency":{"maxInFlight":4,"leaseEntry":"upload_lease"},
	"priority":{"key":"tier","levels":[{"value":"gold","share":100}],"default":"gold"}}}`
	want, wantEntries, err := convert.DecodePolicy([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	var a v1alpha1.RateLimitPolicy
	if err := json.Unmarshal([]byte(js), &a); err != nil {
		t.Fatal(err)
	}
	var stored v1beta1.RateLimitPolicy // what the API server keeps
	if err := a.ConvertTo(&stored); err != nil {
		t.Fatal(err)
	}
	if _, ok := stored.Annotations[v1alpha1.V1alpha1SpecAnnotation]; !ok {
		t.Fatalf("the stored policy keeps no v1alpha1 annotation: %v", stored.Annotations)
	}
	got, entries, err := convert.StoredPolicy(&stored)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) || !equality.Semantic.DeepEqual(entries, wantEntries) || len(got.Annotations) != 0 {
		t.Errorf("StoredPolicy: spec %+v entries %+v annotations %v\nwant spec %+v entries %+v", got.Spec, entries, got.Annotations, want.Spec, wantEntries)
	}

	plain := stored.DeepCopy()
	delete(plain.Annotations, v1alpha1.V1alpha1SpecAnnotation)
	if _, entries, err := convert.StoredPolicy(plain); err != nil || entries != nil {
		t.Errorf("a v1beta1 policy: entries %+v, %v; want none", entries, err)
	}

	forged := stored.DeepCopy() // an annotation raising the limit the spec says
	forged.Annotations[v1alpha1.V1alpha1SpecAnnotation] = strings.Replace(forged.Annotations[v1alpha1.V1alpha1SpecAnnotation], `"maxInFlight":4`, `"maxInFlight":400`, 1)
	got, entries, err = convert.StoredPolicy(forged)
	if err != nil || entries != nil || got.Spec.Limit.Concurrency.MaxInFlight != 4 {
		t.Errorf("a forged annotation: entries %+v, maxInFlight %d, %v; want no entries and the stored 4", entries, got.Spec.Limit.Concurrency.MaxInFlight, err)
	}
}
