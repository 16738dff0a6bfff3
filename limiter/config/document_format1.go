package config

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Format 1, the snapshot document before format 2: no "format" field
// (or 1), each policy's defaulted v1alpha1 spec, and beside it the v1beta1
// scope and requestOverride v1alpha1 has no field for. A limiter of this
// version loads it, as the operator of the version before writes it: each
// spec is converted to v1beta1 by the API package (api/convert), and the
// snapshot is acknowledged with the version that operator computed, the
// hash of the document, which it wrote canonically. (A format-1 document
// written by hand in another spelling gets the hash of its own bytes.)
// testdata/format1 holds one, as main wrote it.

// documentV1alpha1 is a format-1 document.
type documentV1alpha1 struct {
	Format      int                      `json:"format,omitempty"`
	Enforcement Enforcement              `json:"enforcement"`
	Policies    []documentPolicyV1alpha1 `json:"policies"`
	Pods        int32                    `json:"pods,omitempty"`
	ForwardAuth []v1beta1.ForwardAuth    `json:"forwardAuth,omitempty"`
	Budgets     *Budgets                 `json:"budgets,omitempty"`
}

// documentPolicyV1alpha1 is a policy of a format-1 document.
type documentPolicyV1alpha1 struct {
	Namespace       string                   `json:"namespace"`
	Name            string                   `json:"name"`
	UID             string                   `json:"uid,omitempty"`
	Generation      int64                    `json:"generation,omitempty"`
	Spec            json.RawMessage          `json:"spec"` // a v1alpha1 RateLimitPolicySpec
	Scope           *v1beta1.RegionScope     `json:"scope,omitempty"`
	RequestOverride *v1beta1.RequestOverride `json:"requestOverride,omitempty"`
}

// parseDocumentV1alpha1 is ParseDocument for format 1.
func parseDocumentV1alpha1(data []byte) (*Snapshot, error) {
	var d documentV1alpha1
	if err := decodeDocument(data, &d); err != nil {
		return nil, err
	}
	sources := make([]Source, len(d.Policies))
	for i, p := range d.Policies {
		spec, entries, err := convert.DecodeSpec(p.Spec)
		if err != nil {
			return nil, fmt.Errorf("snapshot document: policies[%d].spec (%s/%s): %w", i, p.Namespace, p.Name, err)
		}
		if r := spec.Limit.Rate; r != nil {
			r.Scope, r.RequestOverride = p.Scope, p.RequestOverride
		} else if p.Scope != nil || p.RequestOverride != nil {
			return nil, fmt.Errorf("snapshot document: policies[%d] (%s/%s): scope and requestOverride apply only to a rate limit", i, p.Namespace, p.Name)
		}
		dp := DocumentPolicy{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation, Spec: spec, Entries: entries}
		sources[i] = *dp.source()
	}
	snap, err := CompileSources(sources)
	if err != nil {
		return nil, fmt.Errorf("snapshot document: %w", err)
	}
	if err := finishDocument(snap, d.Enforcement, d.Pods, d.ForwardAuth, d.Budgets); err != nil {
		return nil, err
	}
	snap.Version = versionOf(data)
	return snap, nil
}
