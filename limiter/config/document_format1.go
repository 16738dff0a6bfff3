package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Format 1, the snapshot document before format 2: no "format" field
// (or 1), each policy's defaulted v1alpha1 spec, and the v1beta1 scope and
// requestOverride v1alpha1 has no field for beside it. A limiter of this
// version loads it, as the operator of the version before writes it, and
// acknowledges it with the version that operator computed: the hash of
// its format-1 encoding (testdata/format1 holds one, as main wrote it).

// documentV1alpha1 is a format-1 document.
type documentV1alpha1 struct {
	Enforcement Enforcement              `json:"enforcement"`
	Policies    []documentPolicyV1alpha1 `json:"policies"`
	Pods        int32                    `json:"pods,omitempty"`
	ForwardAuth []v1alpha1.ForwardAuth   `json:"forwardAuth,omitempty"`
	Budgets     *Budgets                 `json:"budgets,omitempty"`
}

// documentPolicyV1alpha1 is a policy of a format-1 document.
type documentPolicyV1alpha1 struct {
	Namespace       string                       `json:"namespace"`
	Name            string                       `json:"name"`
	UID             string                       `json:"uid,omitempty"`
	Generation      int64                        `json:"generation,omitempty"`
	Spec            v1alpha1.RateLimitPolicySpec `json:"spec"`
	Scope           *v1beta1.RegionScope         `json:"scope,omitempty"`
	RequestOverride *v1beta1.RequestOverride     `json:"requestOverride,omitempty"`
}

func (p documentPolicyV1alpha1) object() *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID), Generation: p.Generation},
		Spec:       *p.Spec.DeepCopy(),
	}
}

// parseDocumentV1alpha1 is ParseDocument for format 1.
func parseDocumentV1alpha1(data []byte) (*Snapshot, error) {
	var d documentV1alpha1
	if err := decodeDocument(data, &d); err != nil {
		return nil, err
	}
	objs := make([]v1alpha1.RateLimitPolicy, len(d.Policies))
	scopes := make([]*v1beta1.RegionScope, len(d.Policies))
	overrides := make([]*v1beta1.RequestOverride, len(d.Policies))
	for i, p := range d.Policies {
		objs[i], scopes[i], overrides[i] = *p.object(), p.Scope, p.RequestOverride
	}
	snap, err := compileScoped(objs, scopes, overrides)
	if err != nil {
		return nil, fmt.Errorf("snapshot document: %w", err)
	}
	if err := finishDocument(snap, d.Enforcement, d.Pods, d.ForwardAuth, d.Budgets); err != nil {
		return nil, err
	}
	snap.Version = hashV1alpha1(snap)
	return snap, nil
}

// hashV1alpha1 is the version of the snapshot's canonical format-1
// document, exactly as the operator of the version before computes it.
func hashV1alpha1(s *Snapshot) string {
	c := documentV1alpha1{Enforcement: s.Enforcement, Policies: make([]documentPolicyV1alpha1, len(s.Policies)), Pods: s.Pods,
		ForwardAuth: DefaultForwardAuth(forwardAuthSource(s)), Budgets: s.Budgets}
	if c.Enforcement == "" {
		c.Enforcement = EnforcementEnabled
	}
	for i, p := range s.Policies {
		c.Policies[i] = documentPolicyV1alpha1{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation,
			Spec: *SpecOf(p), Scope: compiledScope(p), RequestOverride: compiledOverride(p)}
	}
	slices.SortFunc(c.Policies, func(a, b documentPolicyV1alpha1) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	data, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("config: encoding a format-1 snapshot document: %v", err))
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
