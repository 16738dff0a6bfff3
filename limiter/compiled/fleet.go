package compiled

import (
	"slices"
	"strings"
)

// Budgets are what each namespace's policies may cost a limiter per
// request and per second: Default for every namespace, Namespaces for the
// overridden ones (fully resolved, so no field falls back).
type Budgets struct {
	Default    NamespaceBudget            `json:"default"`
	Namespaces map[string]NamespaceBudget `json:"namespaces,omitempty"`
}

// NamespaceBudget is one namespace's budget on a limiter pod.
type NamespaceBudget struct {
	// MaxPoliciesPerRequest is how many of the namespace's policies one
	// request may match; a request that matches more is denied.
	MaxPoliciesPerRequest int32 `json:"maxPoliciesPerRequest"`
	// StoreCallsPerSecond is how many policy decisions against the store
	// this pod makes per second for the namespace (burst: one second's
	// worth); past it, each policy's failure mode answers.
	StoreCallsPerSecond int32 `json:"storeCallsPerSecond"`
}

// For is namespace ns's budget.
func (b *Budgets) For(ns string) NamespaceBudget {
	if nb, ok := b.Namespaces[ns]; ok {
		return nb
	}
	return b.Default
}

// ForwardAuthSource is where a forward-auth descriptor entry's value comes
// from (spec.forwardAuth[].descriptors[].from).
type ForwardAuthSource string

// The sources of a forward-auth entry.
const (
	FromMethod   ForwardAuthSource = "Method"
	FromPath     ForwardAuthSource = "Path"
	FromHost     ForwardAuthSource = "Host"
	FromClientIP ForwardAuthSource = "ClientIP"
	FromHeader   ForwardAuthSource = "Header"
)

// ForwardAuth is one domain's compiled, defaulted forward-auth mapping.
type ForwardAuth struct {
	Domain      string
	Descriptors []ForwardAuthDescriptor
	// DenyOnMissing is onMissing Deny: a request that lacks a value is
	// denied, not allowed.
	DenyOnMissing bool
	// DenyStatus is the HTTP status of a denial.
	DenyStatus int
	// FoldPathCase is pathCase Insensitive: a Path entry's value is
	// lower-cased (server.NormalizePath).
	FoldPathCase bool
	// Conflict, when not empty, says why the mapping fills an entry that
	// steers the limiter for a policy of its domain (a lease entry, or a
	// priority key from a request header): forward-auth refuses it.
	Conflict string
}

// ForwardAuthDescriptor is one entry a forward-auth mapping builds.
type ForwardAuthDescriptor struct {
	Key  string
	From ForwardAuthSource
	// Header is the request header of From Header.
	Header string
}

// ForwardAuthFor returns the forward-auth mapping of domain, or nil when
// the snapshot has none.
func (s *Snapshot) ForwardAuthFor(domain string) *ForwardAuth {
	if s == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(s.ForwardAuth, domain, func(m ForwardAuth, d string) int {
		return strings.Compare(m.Domain, d)
	})
	if !ok {
		return nil
	}
	return &s.ForwardAuth[i]
}
