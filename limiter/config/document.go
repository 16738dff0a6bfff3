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
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Enforcement is a fleet's kill switch (package compiled's).
type Enforcement = compiled.Enforcement

const (
	// EnforcementEnabled enforces policies: the default.
	EnforcementEnabled = compiled.EnforcementEnabled
	// EnforcementDisabled allows every request; decisions are still made
	// and would-be denials counted as shadow.
	EnforcementDisabled = compiled.EnforcementDisabled
)

// Keys of the snapshot ConfigMap an operator writes for a fleet. A document
// larger than MaxPlainDocument is stored gzip-compressed under
// DocumentGzipKey in binaryData instead of DocumentKey, never truncated.
const (
	DocumentKey      = "snapshot.json"
	DocumentGzipKey  = "snapshot.json.gz"
	VersionKey       = "version"
	MaxPlainDocument = 512 << 10
)

// Document is a snapshot as stored and exchanged: the operator writes it,
// limiter pods load it. Its canonical encoding (EncodeDocument) is
// deterministic, and the snapshot version is its hash.
type Document struct {
	// Enforcement is Enabled or Disabled; empty means Enabled.
	Enforcement Enforcement `json:"enforcement"`
	// Policies are sorted by namespace and name in the canonical encoding.
	Policies []DocumentPolicy `json:"policies"`
	// Pods is how many limiter pods share the fleet's limits: while the
	// store can't answer, a failureMode Local policy enforces limit/Pods in
	// each pod. 0 leaves the limiter's own setting.
	Pods int32 `json:"pods,omitempty"`
	// ForwardAuth are the fleet's forward-auth mappings, sorted by domain
	// in the canonical encoding.
	ForwardAuth []v1alpha1.ForwardAuth `json:"forwardAuth,omitempty"`
	// Budgets are the per-namespace budgets the limiters enforce on the
	// request path (the fleet's spec.tenantBudget, resolved); nil enforces
	// none, as for a policy file.
	Budgets *Budgets `json:"budgets,omitempty"`
}

// Budgets and NamespaceBudget are package compiled's.
type (
	Budgets         = compiled.Budgets
	NamespaceBudget = compiled.NamespaceBudget
)

func validateBudgets(b *Budgets) error {
	check := func(what string, nb NamespaceBudget) error {
		if nb.MaxPoliciesPerRequest < 1 {
			return fmt.Errorf("budgets: %s: maxPoliciesPerRequest %d is below 1", what, nb.MaxPoliciesPerRequest)
		}
		if nb.StoreCallsPerSecond < 1 {
			return fmt.Errorf("budgets: %s: storeCallsPerSecond %d is below 1", what, nb.StoreCallsPerSecond)
		}
		return nil
	}
	if err := check("default", b.Default); err != nil {
		return err
	}
	for ns, nb := range b.Namespaces {
		if err := check("namespace "+ns, nb); err != nil {
			return err
		}
	}
	return nil
}

// PolicyDocumentBytes is the size of one policy in a snapshot document:
// the canonical JSON of its defaulted entry, and the comma before it. A
// document's size is about the sum over its policies.
func PolicyDocumentBytes(p *v1alpha1.RateLimitPolicy) int {
	obj := p.DeepCopy()
	DefaultPolicy(obj)
	data, err := json.Marshal(DocumentPolicy{Namespace: obj.Namespace, Name: obj.Name, UID: string(obj.UID), Generation: obj.Generation, Spec: obj.Spec})
	if err != nil {
		panic(fmt.Sprintf("config: encoding a snapshot policy: %v", err))
	}
	return len(data) + 1
}

// DocumentPolicy is one policy of a Document: its identity, the generation
// the snapshot holds, and its defaulted spec.
type DocumentPolicy struct {
	Namespace  string                       `json:"namespace"`
	Name       string                       `json:"name"`
	UID        string                       `json:"uid,omitempty"`
	Generation int64                        `json:"generation,omitempty"`
	Spec       v1alpha1.RateLimitPolicySpec `json:"spec"`
	// Scope is the policy's v1beta1 spec.limit.rate.scope, which v1alpha1
	// has no field for; omitted for Region.
	Scope *v1beta1.RegionScope `json:"scope,omitempty"`
	// RequestOverride is the policy's v1beta1
	// spec.limit.rate.requestOverride; omitted when it did not opt in.
	RequestOverride *v1beta1.RequestOverride `json:"requestOverride,omitempty"`
}

// DocumentFor builds the document of accepted policies.
func DocumentFor(policies []v1alpha1.RateLimitPolicy, enforcement Enforcement) Document {
	d := Document{Enforcement: enforcement, Policies: make([]DocumentPolicy, 0, len(policies))}
	for i := range policies {
		p := &policies[i]
		d.Policies = append(d.Policies, DocumentPolicy{
			Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Generation: p.Generation, Spec: p.Spec,
			Scope: globalOnly(scopeOf(p)), RequestOverride: requestOverrideOf(p),
		})
	}
	return d
}

// EncodeDocument returns the canonical JSON of d (defaults applied,
// policies sorted) and its version, the first 16 hex digits of its SHA-256.
// Equal policies give equal bytes, whatever their order or formatting.
func EncodeDocument(d Document) (data []byte, version string) {
	c := Document{Enforcement: d.Enforcement, Policies: slices.Clone(d.Policies), Pods: d.Pods,
		ForwardAuth: DefaultForwardAuth(d.ForwardAuth), Budgets: d.Budgets}
	if c.Enforcement == "" {
		c.Enforcement = EnforcementEnabled
	}
	if c.Policies == nil {
		c.Policies = []DocumentPolicy{}
	}
	for i := range c.Policies {
		obj := c.Policies[i].object()
		DefaultPolicy(obj)
		c.Policies[i].Namespace, c.Policies[i].Spec = obj.Namespace, obj.Spec
	}
	slices.SortFunc(c.Policies, func(a, b DocumentPolicy) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	data, err := json.Marshal(c) // struct fields in declaration order, map keys sorted
	if err != nil {
		panic(fmt.Sprintf("config: encoding a snapshot document: %v", err))
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:8])
}

func (p DocumentPolicy) object() *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID), Generation: p.Generation},
		Spec:       *p.Spec.DeepCopy(),
	}
}

// ParseDocument decodes and compiles a snapshot document. It is strict:
// unknown fields, invalid or conflicting policies are errors, and nothing
// is half-applied.
func ParseDocument(data []byte) (*Snapshot, error) {
	var d Document
	strict, err := kjson.UnmarshalStrict(data, &d, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("snapshot document: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("snapshot document: %v", strict)
	}
	switch d.Enforcement {
	case "", EnforcementEnabled, EnforcementDisabled:
	default:
		return nil, fmt.Errorf("snapshot document: enforcement %q: want Enabled or Disabled", d.Enforcement)
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
	if d.Enforcement == EnforcementDisabled {
		snap.Enforcement = EnforcementDisabled
	}
	if d.Pods < 0 {
		return nil, fmt.Errorf("snapshot document: pods %d is negative", d.Pods)
	}
	snap.Pods = d.Pods
	if errs := ValidateForwardAuth(d.ForwardAuth, field.NewPath("forwardAuth")); len(errs) > 0 {
		return nil, fmt.Errorf("snapshot document: %v", errs.ToAggregate())
	}
	setForwardAuth(snap, DefaultForwardAuth(d.ForwardAuth))
	if d.Budgets != nil {
		if err := validateBudgets(d.Budgets); err != nil {
			return nil, fmt.Errorf("snapshot document: %w", err)
		}
		snap.Budgets = d.Budgets
	}
	snap.Version = hash(snap)
	return snap, nil
}

// DocumentOf returns the snapshot as a document.
func DocumentOf(s *Snapshot) Document {
	d := Document{Enforcement: s.Enforcement, Policies: make([]DocumentPolicy, len(s.Policies)), Pods: s.Pods,
		ForwardAuth: forwardAuthSource(s), Budgets: s.Budgets}
	for i, p := range s.Policies {
		d.Policies[i] = DocumentPolicy{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation, Spec: *SpecOf(p)}
		if p.Global {
			d.Policies[i].Scope = globalOnly(ptrTo(v1beta1.ScopeGlobal))
		}
		if p.RequestOverrideMax > 0 {
			d.Policies[i].RequestOverride = &v1beta1.RequestOverride{Maximum: p.RequestOverrideMax}
		}
	}
	return d
}

// hash is the version of the snapshot's canonical document.
func hash(s *Snapshot) string {
	_, v := EncodeDocument(DocumentOf(s))
	return v
}
