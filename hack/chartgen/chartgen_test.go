package main

import (
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

func TestSplitRules(t *testing.T) {
	rule := func(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
	}
	got, err := splitRules([]rbacv1.PolicyRule{
		rule("", []string{"configmaps", "namespaces"}, "get", "list"),
		rule("", []string{"events"}, "create"),
		rule("coordination.k8s.io", []string{"leases"}, "get", "update"),
		rule("ratelimit.sluice.dev", []string{"ratelimitpolicies", "ratelimitpolicies/status"}, "get"),
		{NonResourceURLs: []string{"/v1/admin/*"}, Verbs: []string{"get"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := ruleSets{
		// Non-resource URLs (the limiters' admin plane) are cluster-wide.
		Cluster: []rbacv1.PolicyRule{rule("", []string{"namespaces"}, "get", "list"),
			{NonResourceURLs: []string{"/v1/admin/*"}, Verbs: []string{"get"}}},
		Namespaced: []rbacv1.PolicyRule{
			rule("", []string{"configmaps"}, "get", "list"),
			rule("", []string{"events"}, "create"),
			rule("ratelimit.sluice.dev", []string{"ratelimitpolicies", "ratelimitpolicies/status"}, "get"),
		},
		LeaderElection: []rbacv1.PolicyRule{
			rule("", []string{"events"}, "create"),
			rule("coordination.k8s.io", []string{"leases"}, "get", "update"),
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("splitRules:\n got %+v\nwant %+v", got, want)
	}

	for _, bad := range []rbacv1.PolicyRule{
		rule("", []string{"*"}, "get"),
		rule("apps", []string{"deployments"}, "*"),
		rule("*", []string{"deployments"}, "get"),
		{NonResourceURLs: []string{"*"}, Verbs: []string{"get"}},
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"*"}},
		{NonResourceURLs: []string{"/metrics"}, Resources: []string{"pods"}, Verbs: []string{"get"}},
	} {
		if _, err := splitRules([]rbacv1.PolicyRule{bad}); err == nil {
			t.Errorf("splitRules accepted %+v", bad)
		}
	}
}

func TestCRDTemplate(t *testing.T) {
	crd := `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.18.0
  name: things.example.com
spec:
  description: a {{ template }} in a description
`
	got, err := crdTemplate("config/crd/bases/things.yaml", crd)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"{{- if .Values.crds.enabled }}\napiVersion:",
		"  annotations:\n    {{- if .Values.crds.keep }}\n    helm.sh/resource-policy: keep\n    {{- end }}\n    controller-gen",
		"  labels:\n    {{- include \"sluice.labels\" . | nindent 4 }}\n  name: things.example.com",
		`a {{ "{{" }} template }} in a description`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("template lacks %q:\n%s", want, got)
		}
	}
	if _, err := crdTemplate("x.yaml", "apiVersion: v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x\n"); err == nil {
		t.Error("crdTemplate accepted a CRD without annotations first")
	}
}
