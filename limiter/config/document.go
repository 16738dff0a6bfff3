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

// Formats of a snapshot document. A document says its format in its
// "format" field; one without it is format 1. A limiter loads every format
// up to DocumentFormat and refuses a newer one, keeping its last good
// snapshot, so that during an upgrade limiters of the new version load
// what the old operator writes and those of the old version refuse what
// the new operator writes (they decode strictly: "format" is an unknown
// field to them) instead of misreading it.
const (
	// DocumentFormat is the format this version writes: each policy's
	// defaulted v1beta1 spec, and beside it the lease entry and priority
	// key it names where v1beta1 leaves them to the fleet.
	DocumentFormat = 2
	// DocumentFormatV1alpha1 is the format before: each policy's
	// defaulted v1alpha1 spec, with the v1beta1 scope and requestOverride
	// in side fields (document_format1.go).
	DocumentFormatV1alpha1 = 1
)

// Document is a snapshot as stored and exchanged, in format 2: the
// operator writes it, limiter pods load it. Its canonical encoding
// (EncodeDocument) is deterministic, and the snapshot version is its hash.
type Document struct {
	// Format is DocumentFormat in the canonical encoding.
	Format int `json:"format"`
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
	ForwardAuth []v1beta1.ForwardAuth `json:"forwardAuth,omitempty"`
	// Budgets are the per-namespace budgets the limiters enforce on the
	// request path (the fleet's spec.tenantBudget, resolved); nil enforces
	// none, as for a policy file.
	Budgets *Budgets `json:"budgets,omitempty"`
}

// The defaults of a namespace's budget (LimiterFleet
// spec.tenantBudget.maxPoliciesPerRequest and
// storeCallsPerSecondPerNamespace, both API versions).
const (
	DefaultMaxPoliciesPerRequest           = 32
	DefaultStoreCallsPerSecondPerNamespace = 20000
)

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
func PolicyDocumentBytes(p *Source) int {
	data, err := json.Marshal(canonicalPolicy(documentPolicyOf(p)))
	if err != nil {
		panic(fmt.Sprintf("config: encoding a snapshot policy: %v", err))
	}
	return len(data) + 1
}

// DocumentPolicy is one policy of a Document: its identity, the generation
// the snapshot holds, and its defaulted v1beta1 spec.
type DocumentPolicy struct {
	Namespace  string                      `json:"namespace"`
	Name       string                      `json:"name"`
	UID        string                      `json:"uid,omitempty"`
	Generation int64                       `json:"generation,omitempty"`
	Spec       v1beta1.RateLimitPolicySpec `json:"spec"`
	// Entries are the lease entry and priority key the policy counts on
	// where they are not the defaults (sluice_lease, priority): v1beta1
	// leaves them to the fleet's spec.entries, a v1alpha1 policy names
	// them itself. Only lease and priority are taken; nil for the defaults.
	Entries *v1beta1.FleetEntries `json:"entries,omitempty"`
}

// DocumentFor builds the document of accepted policies.
func DocumentFor(policies []Source, enforcement Enforcement) Document {
	d := Document{Enforcement: enforcement, Policies: make([]DocumentPolicy, 0, len(policies))}
	for i := range policies {
		d.Policies = append(d.Policies, documentPolicyOf(&policies[i]))
	}
	return d
}

// documentPolicyOf is p's entry in a document.
func documentPolicyOf(p *Source) DocumentPolicy {
	d := DocumentPolicy{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Generation: p.Generation, Spec: *p.Spec.DeepCopy()}
	if p.Entries != nil {
		d.Entries = &v1beta1.FleetEntries{Lease: p.Entries.Lease, Priority: p.Entries.Priority}
	}
	return d
}

// canonicalPolicy is p defaulted, with its entries only where they are
// not the defaults and only those the policy counts on, and a Region
// scope said by saying nothing.
func canonicalPolicy(p DocumentPolicy) DocumentPolicy {
	obj := p.source()
	DefaultPolicy(&obj.RateLimitPolicy)
	p.Namespace, p.Spec = obj.Namespace, obj.Spec
	if r := p.Spec.Limit.Rate; r != nil && r.Scope != nil && *r.Scope == v1beta1.ScopeRegion {
		r.Scope = nil
	}
	var e v1beta1.FleetEntries
	if le, holds := leaseEntryOf(&p.Spec, p.Entries); holds && le != defaultLeaseEntry {
		e.Lease = &le
	}
	if ps, _ := priorityOf(&p.Spec); ps != nil && priorityKeyOf(p.Entries) != defaultPriorityEntry {
		e.Priority = ptrTo(priorityKeyOf(p.Entries))
	}
	p.Entries = nil
	if e != (v1beta1.FleetEntries{}) {
		p.Entries = &e
	}
	return p
}

// EncodeDocument returns the canonical JSON of d in format DocumentFormat
// (defaults applied, policies sorted) and its version, the first 16 hex
// digits of its SHA-256. Equal policies give equal bytes, whatever their
// order or formatting.
func EncodeDocument(d Document) (data []byte, version string) {
	c := Document{Format: DocumentFormat, Enforcement: d.Enforcement, Policies: slices.Clone(d.Policies), Pods: d.Pods,
		ForwardAuth: DefaultForwardAuth(d.ForwardAuth), Budgets: d.Budgets}
	if c.Enforcement == "" {
		c.Enforcement = EnforcementEnabled
	}
	if c.Policies == nil {
		c.Policies = []DocumentPolicy{}
	}
	for i := range c.Policies {
		c.Policies[i] = canonicalPolicy(c.Policies[i])
	}
	slices.SortFunc(c.Policies, func(a, b DocumentPolicy) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	data, err := json.Marshal(c) // struct fields in declaration order, map keys sorted
	if err != nil {
		panic(fmt.Sprintf("config: encoding a snapshot document: %v", err))
	}
	return data, versionOf(data)
}

// versionOf is the version of a canonical document: the first 16 hex
// digits of its SHA-256.
func versionOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// source is the policy p describes, as the limiter compiles it.
func (p DocumentPolicy) source() *Source {
	s := &Source{RateLimitPolicy: v1beta1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID), Generation: p.Generation},
		Spec:       *p.Spec.DeepCopy(),
	}}
	if p.Entries != nil {
		s.Entries = p.Entries.DeepCopy()
	}
	return s
}

// ParseDocument decodes and compiles a snapshot document of any format up
// to DocumentFormat. It is strict: unknown fields, invalid or conflicting
// policies and a newer format are errors, and nothing is half-applied.
func ParseDocument(data []byte) (*Snapshot, error) {
	format, err := documentFormat(data)
	if err != nil {
		return nil, fmt.Errorf("snapshot document: %w", err)
	}
	if format == DocumentFormatV1alpha1 {
		return parseDocumentV1alpha1(data) // document_format1.go
	}
	var d Document
	if err := decodeDocument(data, &d); err != nil {
		return nil, err
	}
	sources := make([]Source, len(d.Policies))
	for i, p := range d.Policies {
		sources[i] = *p.source()
	}
	snap, err := CompileSources(sources)
	if err != nil {
		return nil, fmt.Errorf("snapshot document: %w", err)
	}
	if err := finishDocument(snap, d.Enforcement, d.Pods, d.ForwardAuth, d.Budgets); err != nil {
		return nil, err
	}
	snap.Version = hash(snap)
	return snap, nil
}

// documentFormat reads a document's format, 1 when it says none, and
// refuses one this version does not know.
func documentFormat(data []byte) (int, error) {
	var peek struct {
		Format *json.Number `json:"format"`
	}
	if err := json.Unmarshal(data, &peek); err != nil {
		return 0, err
	}
	if peek.Format == nil {
		return DocumentFormatV1alpha1, nil
	}
	f, err := peek.Format.Int64()
	switch {
	case err != nil || f < DocumentFormatV1alpha1:
		return 0, fmt.Errorf("format %s: want a whole number from %d to %d", peek.Format, DocumentFormatV1alpha1, DocumentFormat)
	case f > DocumentFormat:
		return 0, fmt.Errorf("format %d is newer than this limiter knows (formats up to %d): "+
			"the operator that wrote it is of a later version; upgrade the limiter to it", f, DocumentFormat)
	}
	return int(f), nil
}

// decodeDocument decodes data into d strictly: unknown and duplicate
// fields are errors.
func decodeDocument(data []byte, d any) error {
	strict, err := kjson.UnmarshalStrict(data, d, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("snapshot document: %w", err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("snapshot document: %v", strict)
	}
	return nil
}

// finishDocument checks and sets on snap what a document says beside its
// policies, in any format.
func finishDocument(snap *Snapshot, enforcement Enforcement, pods int32, fa []v1beta1.ForwardAuth, budgets *Budgets) error {
	switch enforcement {
	case "", EnforcementEnabled:
	case EnforcementDisabled:
		snap.Enforcement = EnforcementDisabled
	default:
		return fmt.Errorf("snapshot document: enforcement %q: want Enabled or Disabled", enforcement)
	}
	if pods < 0 {
		return fmt.Errorf("snapshot document: pods %d is negative", pods)
	}
	snap.Pods = pods
	if errs := ValidateForwardAuth(fa, field.NewPath("forwardAuth")); len(errs) > 0 {
		return fmt.Errorf("snapshot document: %v", errs.ToAggregate())
	}
	setForwardAuth(snap, DefaultForwardAuth(fa))
	if budgets != nil {
		if err := validateBudgets(budgets); err != nil {
			return fmt.Errorf("snapshot document: %w", err)
		}
		snap.Budgets = budgets
	}
	return nil
}

// DocumentOf returns the snapshot as a document.
func DocumentOf(s *Snapshot) Document {
	d := Document{Format: DocumentFormat, Enforcement: s.Enforcement, Policies: make([]DocumentPolicy, len(s.Policies)), Pods: s.Pods,
		ForwardAuth: forwardAuthSource(s), Budgets: s.Budgets}
	for i, p := range s.Policies {
		d.Policies[i] = documentPolicyOf(sourceOf(p))
	}
	return d
}

// hash is the version of the snapshot's canonical document.
func hash(s *Snapshot) string {
	_, v := EncodeDocument(DocumentOf(s))
	return v
}

func ptrTo[T any](v T) *T { return &v }
