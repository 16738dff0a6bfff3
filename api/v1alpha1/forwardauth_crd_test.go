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

package v1alpha1_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/config"
)

// baseForwardAuth is a valid mapping that each case changes in one way.
func baseForwardAuth(domain string) v1alpha1.ForwardAuth {
	return v1alpha1.ForwardAuth{
		Domain: domain,
		Descriptors: []v1alpha1.ForwardAuthDescriptor{
			{Key: "api_key", From: v1alpha1.FromHeader, Header: ptr.To("X-Api-Key")},
			{Key: "remote_address", From: v1alpha1.FromClientIP},
		},
	}
}

// forwardAuthBadCase is a spec.forwardAuth that the API server, the Go
// validator and a policy file must all reject. raw changes the list as JSON
// after typed, for values the Go types can't hold.
type forwardAuthBadCase struct {
	name  string
	typed func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth
	raw   func(fa []any)
	// field is the path the API server names; message a substring of its
	// message there, and goMessage of the Go validator's when they differ.
	field, message, goMessage string
}

var forwardAuthBadCases = []forwardAuthBadCase{
	{
		name: "from Header without a header name",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Descriptors[0].Header = nil
			return fa
		},
		field:   "spec.forwardAuth[0].descriptors[0].header",
		message: "header is required when from is Header",
	},
	{
		name: "a header name with from ClientIP",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Descriptors[1].Header = ptr.To("X-Real-IP")
			return fa
		},
		field:   "spec.forwardAuth[0].descriptors[1].header",
		message: "header applies only when from is Header",
	},
	{
		name: "denyStatus 500, not 4xx",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].DenyStatus = ptr.To[int32](500)
			return fa
		},
		field:   "spec.forwardAuth[0].denyStatus",
		message: "denyStatus must be a 4xx status, from 400 to 499",
	},
	{
		name: "denyStatus 302, not 4xx",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].DenyStatus = ptr.To[int32](302)
			return fa
		},
		field:   "spec.forwardAuth[0].denyStatus",
		message: "denyStatus must be a 4xx status, from 400 to 499",
	},
	{
		name: "duplicate domain",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			return append(fa, baseForwardAuth(fa[0].Domain))
		},
		field:     "spec.forwardAuth[1]",
		message:   `Duplicate value: map[string]interface {}{"domain":"shop"}`,
		goMessage: `Duplicate value: "domain \"shop\""`,
	},
	{
		name: "unknown from",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Descriptors[1].From = "Cookie"
			return fa
		},
		field:   "spec.forwardAuth[0].descriptors[1].from",
		message: `Unsupported value: "Cookie": supported values: "Method", "Path", "Host", "ClientIP", "Header"`,
	},
	{
		name: "unknown onMissing",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].OnMissing = ptr.To[v1alpha1.ForwardAuthOnMissing]("Maybe")
			return fa
		},
		field:   "spec.forwardAuth[0].onMissing",
		message: `Unsupported value: "Maybe": supported values: "Allow", "Deny"`,
	},
	{
		name: "unknown pathCase",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].PathCase = ptr.To[v1alpha1.ForwardAuthPathCase]("Lower")
			return fa
		},
		field:   "spec.forwardAuth[0].pathCase",
		message: `Unsupported value: "Lower": supported values: "Sensitive", "Insensitive"`,
	},
	{
		name: "duplicate descriptor key",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Descriptors[1].Key = "api_key"
			return fa
		},
		field:     "spec.forwardAuth[0].descriptors[1]",
		message:   `Duplicate value: map[string]interface {}{"key":"api_key"}`,
		goMessage: `Duplicate value: "key \"api_key\""`,
	},
	{
		name: "a header name that is not a token",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Descriptors[0].Header = ptr.To("X Api Key")
			return fa
		},
		field:   "spec.forwardAuth[0].descriptors[0].header",
		message: "should match '^[A-Za-z0-9!#$%&'*+.^_|~-]+$'",
	},
	{
		name: "no descriptors",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Descriptors = []v1alpha1.ForwardAuthDescriptor{}
			return fa
		},
		field:     "spec.forwardAuth[0].descriptors",
		message:   "should have at least 1 items",
		goMessage: "Required value: must have 1 to 8 entries",
	},
	{
		name: "9 descriptors",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Descriptors = nil
			for i := range v1alpha1.MaxDescriptors + 1 {
				fa[0].Descriptors = append(fa[0].Descriptors, v1alpha1.ForwardAuthDescriptor{Key: fmt.Sprintf("m%d", i), From: v1alpha1.FromMethod})
			}
			return fa
		},
		field:   "spec.forwardAuth[0].descriptors",
		message: "Too many: 9: must have at most 8 items",
	},
	{
		name: "empty domain",
		typed: func(fa []v1alpha1.ForwardAuth) []v1alpha1.ForwardAuth {
			fa[0].Domain = ""
			return fa
		},
		field:     "spec.forwardAuth[0].domain",
		message:   "should be at least 1 chars long",
		goMessage: "Required value",
	},
	{
		name:      "from missing",
		raw:       func(fa []any) { delete(descriptorAt(fa, 0, 1), "from") },
		field:     "spec.forwardAuth[0].descriptors[1].from",
		message:   "Required value",
		goMessage: "Required value",
	},
}

func descriptorAt(fa []any, i, j int) map[string]any {
	return fa[i].(map[string]any)["descriptors"].([]any)[j].(map[string]any)
}

// TestForwardAuthCRDRejects shows each rule of spec.forwardAuth rejecting a
// fleet at admission, and the Go validator, which a policy file goes
// through, naming the same field with the same message.
func TestForwardAuthCRDRejects(t *testing.T) {
	ns := createNamespace(t, "forward-auth-rejects")
	for i, tc := range forwardAuthBadCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := baseFleet(fmt.Sprintf("bad-fa-%d", i))
			f.Namespace = ns
			f.Spec.ForwardAuth = []v1alpha1.ForwardAuth{baseForwardAuth("shop")}
			if tc.typed != nil {
				f.Spec.ForwardAuth = tc.typed(f.Spec.ForwardAuth)
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(f)
			if err != nil {
				t.Fatal(err)
			}
			fa := obj["spec"].(map[string]any)["forwardAuth"].([]any)
			if tc.raw != nil {
				tc.raw(fa)
			}
			err = k8sClient.Create(t.Context(), &unstructured.Unstructured{Object: obj})
			if err == nil {
				deleteAtCleanup(t, f)
			}
			requireCause(t, err, tc.field, tc.message)

			goMessage := tc.message
			if tc.goMessage != "" {
				goMessage = tc.goMessage
			}
			requireForwardAuthRejected(t, fa, tc.field, goMessage)
			requireFileRejected(t, obj, tc.field, goMessage)
		})
	}
}

// requireForwardAuthRejected decodes fa and fails unless ValidateForwardAuth
// names field with a message containing msg.
func requireForwardAuthRejected(t *testing.T, fa []any, fld, msg string) {
	t.Helper()
	data, err := json.Marshal(fa)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []v1alpha1.ForwardAuth
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	errs := config.ValidateForwardAuth(convert.ForwardAuth(decoded), field.NewPath("spec", "forwardAuth"))
	for _, e := range errs {
		if e.Field == fld && strings.Contains(e.Error(), msg) {
			return
		}
	}
	t.Fatalf("ValidateForwardAuth: no error on %s containing %q in: %v", fld, msg, errs)
}

// requireFileRejected writes the fleet into a policy file and fails unless
// loading it fails naming the fleet, the field and the message.
func requireFileRejected(t *testing.T, obj map[string]any, fld, msg string) {
	t.Helper()
	fleet, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	p := basePolicy("per-user")
	p.Namespace = "shop"
	policy, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse("policies.yaml", []byte(string(policy)+"---\n"+string(fleet)))
	fld = strings.Replace(fld, "spec.forwardAuth", "spec.dataPlane.forwardAuth", 1) // the limiter reads the fleet in v1beta1
	name := obj["metadata"].(map[string]any)["name"].(string)
	if err == nil || !strings.Contains(err.Error(), "policies.yaml: document 2 (LimiterFleet forward-auth-rejects/"+name+")") ||
		!strings.Contains(err.Error(), fld) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("policy file: got %v, want an error naming document 2, the fleet, %s and %q", err, fld, msg)
	}
}

// TestForwardAuthCRDAccepts shows the API server accepting mappings at the
// edge of each rule, with the defaults DefaultForwardAuth sets.
func TestForwardAuthCRDAccepts(t *testing.T) {
	ns := createNamespace(t, "forward-auth-accepts")
	every := v1alpha1.ForwardAuth{Domain: "every-source", OnMissing: ptr.To(v1alpha1.OnMissingDeny), DenyStatus: ptr.To[int32](403)}
	for _, from := range v1alpha1.ForwardAuthSources {
		d := v1alpha1.ForwardAuthDescriptor{Key: strings.ToLower(string(from)), From: from}
		if from == v1alpha1.FromHeader {
			d.Header = ptr.To("X-Tenant_ID.v2~")
		}
		every.Descriptors = append(every.Descriptors, d)
	}
	for i, fa := range [][]v1alpha1.ForwardAuth{
		{baseForwardAuth("shop")},
		{every},
		{
			{Domain: "low", DenyStatus: ptr.To[int32](400), Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "m", From: v1alpha1.FromMethod}}},
			{Domain: "high", DenyStatus: ptr.To[int32](499), Descriptors: []v1alpha1.ForwardAuthDescriptor{{Key: "p", From: v1alpha1.FromPath}}},
		},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			f := baseFleet(fmt.Sprintf("good-fa-%d", i))
			f.Namespace = ns
			f.Spec.ForwardAuth = fa
			if errs := config.ValidateForwardAuth(convert.ForwardAuth(fa), field.NewPath("spec", "forwardAuth")); len(errs) > 0 {
				t.Fatalf("ValidateForwardAuth: %v", errs.ToAggregate())
			}
			got := f.DeepCopy()
			if err := k8sClient.Create(t.Context(), got); err != nil {
				t.Fatalf("API server rejected the fleet: %v", err)
			}
			deleteAtCleanup(t, got)
			if diff := cmp.Diff(config.DefaultForwardAuth(convert.ForwardAuth(fa)), config.DefaultForwardAuth(convert.ForwardAuth(got.Spec.ForwardAuth))); diff != "" {
				t.Errorf("API server defaults differ from DefaultForwardAuth (-DefaultForwardAuth +API server):\n%s", diff)
			}
			if got.Spec.ForwardAuth[0].OnMissing == nil || got.Spec.ForwardAuth[0].DenyStatus == nil {
				t.Errorf("API server set no defaults: %+v", got.Spec.ForwardAuth[0])
			}
		})
	}
}

// TestGatewaySamplesAccepted applies config/samples/gateways/policies.yaml:
// its LimiterFleet with forwardAuth and its policies.
func TestGatewaySamplesAccepted(t *testing.T) {
	path := filepath.Join("..", "..", "config", "samples", "gateways", "policies.yaml")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kinds := map[string]int{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) == 0 {
			continue // only comments
		}
		createNamespace(t, obj.GetNamespace())
		if err := k8sClient.Create(t.Context(), obj); err != nil {
			t.Fatalf("%s: %s %s/%s: %v", path, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		deleteAtCleanup(t, obj)
		kinds[obj.GetKind()]++
	}
	if kinds["LimiterFleet"] != 1 || kinds["RateLimitPolicy"] < 1 {
		t.Fatalf("%s holds %v, want a LimiterFleet and policies", path, kinds)
	}
}
