package controllers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/limiter/config"
)

// A fleet's snapshot is one ConfigMap, and the API server refuses a
// ConfigMap whose data and binaryData values add up to more than 1 MiB.
// Were the operator to write every selected policy regardless, one tenant's
// flood of large policies would make every later write fail and freeze the
// fleet for every tenant. So the snapshot holds the policies that fit,
// oldest first (by creation time, then namespace/name), and refuses the
// newest ones that don't: they get Accepted=False with reason SnapshotFull,
// and everything older keeps being enforced and updated. Deleting or
// shrinking policies makes room, and the refused ones are taken in again.
//
// The fleet controller decides (fitSnapshot) and publishes each fleet's
// refusals in SnapshotFits, which the policy controller reads for the
// Accepted condition and which tells it which policies to reconcile when a
// refusal starts or ends.

// MaxSnapshotBytes is the most the snapshot ConfigMap's data may hold, as
// the API server counts it (the lengths of every data and binaryData value).
const MaxSnapshotBytes = 1 << 20

// configMapDataBytes is a ConfigMap's size as the API server's 1 MiB limit
// counts it.
func configMapDataBytes(cm *corev1.ConfigMap) int {
	n := 0
	for _, v := range cm.Data {
		n += len(v)
	}
	for _, v := range cm.BinaryData {
		n += len(v)
	}
	return n
}

// builtSnapshot is a snapshot document and the ConfigMap that stores it.
type builtSnapshot struct {
	document []byte
	version  string
	cm       *corev1.ConfigMap
	stored   int // configMapDataBytes(cm)
}

// fittedSnapshot is the largest snapshot that fits: the kept policies,
// the ones refused for want of room, and the ones refused because their
// namespace is over its budget (overBudget, with a message per namespace).
type fittedSnapshot struct {
	builtSnapshot
	kept, refused []v1beta1.RateLimitPolicy
	overBudget    []v1beta1.RateLimitPolicy
	budgetMessage map[string]string
}

// namespaceShare is a namespace's share of a snapshot: at most policies
// policies in bytes bytes (as PolicyDocumentBytes counts them).
type namespaceShare struct {
	policies, bytes int
}

// withinShares splits policies, oldest first, into those within their
// namespace's share (share) and those over it: of each namespace, the
// longest run of its oldest policies that fits its share is within, and
// every newer one is over, so a namespace over its share loses only its
// own newest policies. size is a policy's bytes. messages says, per
// namespace with a policy over, what its share is and what it holds.
func withinShares(ordered []v1beta1.RateLimitPolicy, share func(ns string) namespaceShare, size func(*v1beta1.RateLimitPolicy) int) (within, over []v1beta1.RateLimitPolicy, sizes []int, messages map[string]string) {
	type tally struct {
		share           namespaceShare
		policies, bytes int
		full            bool
	}
	tallies := map[string]*tally{}
	for i := range ordered {
		p := &ordered[i]
		t := tallies[p.Namespace]
		if t == nil {
			t = &tally{share: share(p.Namespace)}
			tallies[p.Namespace] = t
		}
		n := size(p)
		if t.full || t.policies+1 > t.share.policies || t.bytes+n > t.share.bytes {
			t.full = true
			over = append(over, *p)
			continue
		}
		t.policies, t.bytes = t.policies+1, t.bytes+n
		within = append(within, *p)
		sizes = append(sizes, n)
	}
	for ns, t := range tallies {
		if t.full {
			if messages == nil {
				messages = map[string]string{}
			}
			messages[ns] = fmt.Sprintf("namespace %s is over its budget (spec.tenantBudget of the fleet): at most %d policies in %d bytes of the snapshot; "+
				"it holds its %d oldest policies in %d bytes, and this newer policy would pass it. The fleet enforces the older ones; "+
				"delete or shrink policies of %s, or ask the fleet's owners to raise its budget", ns, t.share.policies, t.share.bytes, t.policies, t.bytes, ns)
		}
	}
	return within, over, sizes, messages
}

// fairOrder orders policies (oldest first, with their sizes) by how
// firmly they are kept when the snapshot has no room for all: the last
// one is the newest policy of the namespace that holds the most bytes,
// and so on, each namespace losing its newest policies first. So a
// namespace that holds less than another never loses a policy to it.
func fairOrder(ordered []v1beta1.RateLimitPolicy, sizes []int) []v1beta1.RateLimitPolicy {
	type stack struct {
		ns    string
		idx   []int // indexes into ordered, oldest first
		bytes int
	}
	byNS := map[string]*stack{}
	var stacks []*stack
	for i := range ordered {
		ns := ordered[i].Namespace
		st := byNS[ns]
		if st == nil {
			st = &stack{ns: ns}
			byNS[ns] = st
			stacks = append(stacks, st)
		}
		st.idx = append(st.idx, i)
		st.bytes += sizes[i]
	}
	out := make([]v1beta1.RateLimitPolicy, len(ordered))
	for k := len(ordered) - 1; k >= 0; k-- {
		// The namespace holding the most bytes loses its newest policy;
		// between equals, the one whose newest policy is newer.
		var top *stack
		for _, st := range stacks {
			if len(st.idx) == 0 {
				continue
			}
			if top == nil || st.bytes > top.bytes || (st.bytes == top.bytes && st.idx[len(st.idx)-1] > top.idx[len(top.idx)-1]) {
				top = st
			}
		}
		i := top.idx[len(top.idx)-1]
		top.idx = top.idx[:len(top.idx)-1]
		top.bytes -= sizes[i]
		out[k] = ordered[i]
	}
	return out
}

// byAge sorts policies oldest first: by creation time, then namespace/name.
func byAge(ps []v1beta1.RateLimitPolicy) []v1beta1.RateLimitPolicy {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b v1beta1.RateLimitPolicy) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
			strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	return out
}

// fitSnapshot chooses the policies of a snapshot that fits in limit bytes.
// First, each namespace keeps the longest run of its oldest policies within
// its share (share; size is a policy's bytes), and the newer ones are over
// budget. Then, if what is left does not fit, namespaces lose their newest
// policies, the one holding the most bytes first (fairOrder), until it
// fits: a namespace is never refused for another's larger or newer
// policies. build makes the snapshot of some policies. hint is a kept
// count from an earlier fit (or -1): the answer itself when exact (the
// inputs have not changed since), else a first guess. The size of a
// snapshot grows with the policies it holds, so a binary search finds the
// cut; no count is built twice.
func fitSnapshot(selected []v1beta1.RateLimitPolicy, limit int, share func(ns string) namespaceShare, size func(*v1beta1.RateLimitPolicy) int,
	hint int, exact bool, build func([]v1beta1.RateLimitPolicy) builtSnapshot) fittedSnapshot {
	within, over, sizes, messages := withinShares(byAge(selected), share, size)
	ordered := fairOrder(within, sizes)
	built := map[int]builtSnapshot{}
	fits := func(n int) bool {
		b, ok := built[n]
		if !ok {
			b = build(ordered[:n])
			built[n] = b
		}
		return b.stored <= limit
	}
	n := hint
	if !exact || hint < 0 || hint > len(ordered) {
		n = largestFit(len(ordered), hint, fits)
	}
	fits(n)
	return fittedSnapshot{builtSnapshot: built[n], kept: byAge(ordered[:n]), refused: byAge(ordered[n:]),
		overBudget: over, budgetMessage: messages}
}

// largestFit returns the largest n in [0, total] for which fits holds,
// given that it holds up to some n and not after; fits(0) is taken to hold
// (an empty snapshot fits). It asks fits(total) first, the common case;
// then guess, when below total, and the count after it; then searches.
func largestFit(total, guess int, fits func(int) bool) int {
	if fits(total) {
		return total
	}
	lo, hi := 0, total // fits(lo), !fits(hi)
	if guess >= 0 && guess < total {
		if !fits(guess) {
			hi = guess
		} else if guess+1 == total || !fits(guess+1) {
			return guess
		} else {
			lo = guess + 1
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// snapshotFullMessage is a refused policy's Accepted message. It names the
// fleet, the limit and what the snapshot holds, which change only when the
// kept policies do: a flood of refusals rewrites no refused policy.
func snapshotFullMessage(fleet types.NamespacedName, kept, stored int) string {
	return fmt.Sprintf("fleet %s: the snapshot is full: it holds the %d oldest policies in %d bytes of the ConfigMap's %d-byte limit, "+
		"and this newer policy does not fit; the fleet enforces the older ones, the namespaces holding the most bytes losing their newest policies first. "+
		"Delete or shrink policies of the fleet to make room",
		fleet, kept, stored, MaxSnapshotBytes)
}

// inputsFingerprint identifies what a fleet's snapshot is made of besides
// the policies' order: their identities and generations, the enforcement,
// the pod count, the forward-auth mappings and the tenant budgets.
func inputsFingerprint(policies []v1beta1.RateLimitPolicy, doc config.Document, budgets *v1beta1.TenantBudgets) string {
	h := sha256.New()
	for i := range policies {
		p := &policies[i]
		fmt.Fprintf(h, "%s/%s/%s/%d;", p.Namespace, p.Name, p.UID, p.Generation)
	}
	fa, _ := json.Marshal(doc.ForwardAuth)
	fmt.Fprintf(h, "|%s|%d|%s", doc.Enforcement, doc.Pods, fa)
	tb, _ := json.Marshal(budgets)
	fmt.Fprintf(h, "|%s", tb)
	return hex.EncodeToString(h.Sum(nil))
}

// fitSnapshot compiles the largest snapshot of the selected policies that
// fits in its ConfigMap, proves the limiters can load it, records it in s,
// and publishes the fleet's refusals.
func (r *LimiterFleetReconciler) fitSnapshot(ctx context.Context, s *fleetScope, selected []v1beta1.RateLimitPolicy, enforcement config.Enforcement) (*fittedSnapshot, error) {
	base := config.Document{Enforcement: enforcement, ForwardAuth: fleetForwardAuth(&s.fleet.Spec), Budgets: documentBudgets(&s.fleet.Spec)}
	sources, err := sourcesByName(selected) // limitersource.go
	if err != nil {
		return nil, err
	}
	// The pods that share the limits while the store is down: the ready
	// ones, or the desired count before any is ready.
	base.Pods = int32(len(s.endpoints))
	if base.Pods == 0 {
		base.Pods = s.fleet.Spec.EffectiveReplicas()
	}
	build := func(ps []v1beta1.RateLimitPolicy) builtSnapshot {
		doc := config.DocumentFor(sources.of(ps), enforcement)
		doc.ForwardAuth, doc.Pods, doc.Budgets = base.ForwardAuth, base.Pods, base.Budgets
		data, version := config.EncodeDocument(doc)
		cm := resources.BuildSnapshotConfigMap(s.fleet, data, version)
		return builtSnapshot{document: data, version: version, cm: cm, stored: configMapDataBytes(cm)}
	}
	key := client.ObjectKeyFromObject(s.fleet)
	ordered := byAge(selected)
	fingerprint := inputsFingerprint(ordered, base, s.fleet.Spec.TenantBudget)
	hint, exact := r.Fits.hint(key, fingerprint)
	fit := fitSnapshot(ordered, MaxSnapshotBytes, snapshotShares(&s.fleet.Spec), sources.documentBytes, hint, exact, build)
	s.document, s.version = fit.document, fit.version
	s.policies, s.refused = len(fit.kept), len(fit.refused)+len(fit.overBudget)
	// What the operator writes, the limiters must load: prove it first.
	if _, err := config.ParseDocument(s.document); err != nil {
		return nil, fmt.Errorf("compiling the snapshot: %w", err)
	}
	s.compiled = true
	if len(fit.refused) > 0 && !exact {
		logf.FromContext(ctx).Info("Snapshot full: refusing the newest policies", "kept", len(fit.kept), "refused", len(fit.refused),
			"bytes", fit.stored, "limit", MaxSnapshotBytes)
	}
	if len(fit.overBudget) > 0 && !exact {
		logf.FromContext(ctx).Info("Namespaces over their budget: refusing their newest policies", "refused", len(fit.overBudget),
			"namespaces", slices.Sorted(maps.Keys(fit.budgetMessage)))
	}
	r.Fits.publish(ctx, key, fingerprint, &fit)
	return &fit, nil
}

// snapshotShares is each namespace's share of the fleet's snapshot, from
// spec.tenantBudget.
func snapshotShares(spec *v1beta1.LimiterFleetSpec) func(ns string) namespaceShare {
	return func(ns string) namespaceShare {
		b := spec.EffectiveBudget(ns)
		return namespaceShare{policies: int(*b.MaxPoliciesPerNamespace), bytes: int(*b.MaxSnapshotBytesPerNamespace)}
	}
}

// documentBudgets are the budgets the fleet's limiters enforce, resolved
// for the snapshot: the default, and each overridden namespace's.
func documentBudgets(spec *v1beta1.LimiterFleetSpec) *config.Budgets {
	limiterBudget := func(b v1beta1.TenantBudget) config.NamespaceBudget {
		return config.NamespaceBudget{MaxPoliciesPerRequest: *b.MaxPoliciesPerRequest, StoreCallsPerSecond: *b.StoreCallsPerSecondPerNamespace}
	}
	// No override names the empty namespace: this is the fleet's budget.
	out := &config.Budgets{Default: limiterBudget(spec.EffectiveBudget(""))}
	if spec.TenantBudget != nil {
		for _, o := range spec.TenantBudget.Overrides {
			if out.Namespaces == nil {
				out.Namespaces = map[string]config.NamespaceBudget{}
			}
			out.Namespaces[o.Namespace] = limiterBudget(spec.EffectiveBudget(o.Namespace))
		}
	}
	return out
}

// fleetForwardAuth is spec.dataPlane.forwardAuth, or none.
func fleetForwardAuth(spec *v1beta1.LimiterFleetSpec) []v1beta1.ForwardAuth {
	if spec.DataPlane == nil {
		return nil
	}
	return spec.DataPlane.ForwardAuth
}
