package controllers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1alpha1"
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

// fittedSnapshot is the largest snapshot that fits: the oldest kept
// policies, and the newer ones refused.
type fittedSnapshot struct {
	builtSnapshot
	kept, refused []v1alpha1.RateLimitPolicy
}

// byAge sorts policies oldest first: by creation time, then namespace/name.
func byAge(ps []v1alpha1.RateLimitPolicy) []v1alpha1.RateLimitPolicy {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b v1alpha1.RateLimitPolicy) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
			strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	return out
}

// fitSnapshot keeps the longest run of the oldest policies whose snapshot
// fits in limit bytes, and refuses the rest. build makes the snapshot of
// some policies. hint is a kept count from an earlier fit (or -1): the
// answer itself when exact (the inputs have not changed since), else a
// first guess. The size of a snapshot grows with the policies it holds, so
// a binary search finds the cut; no count is built twice.
func fitSnapshot(selected []v1alpha1.RateLimitPolicy, limit, hint int, exact bool, build func([]v1alpha1.RateLimitPolicy) builtSnapshot) fittedSnapshot {
	ordered := byAge(selected)
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
	return fittedSnapshot{builtSnapshot: built[n], kept: ordered[:n], refused: ordered[n:]}
}

// largestFit returns the largest n in [0, total] for which fits holds,
// given that it holds up to some n and not after; fits(0) is taken to hold
// (an empty snapshot fits). guess, when in range, is tried first, and the
// count after it.
func largestFit(total, guess int, fits func(int) bool) int {
	lo, hi := 0, total+1 // fits(lo); !fits(hi) once hi <= total
	if guess >= 0 && guess <= total {
		if !fits(guess) {
			hi = guess
		} else if lo = guess; guess < total {
			if !fits(guess + 1) {
				return guess
			}
			lo = guess + 1
		}
	}
	if hi > total {
		if lo == total || fits(total) {
			return total
		}
		hi = total
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
		"and this newer policy does not fit; the fleet enforces the older ones. Delete or shrink policies of the fleet to make room",
		fleet, kept, stored, MaxSnapshotBytes)
}

// inputsFingerprint identifies what a fleet's snapshot is made of besides
// the policies' order: their identities and generations, the enforcement,
// the pod count and the forward-auth mappings.
func inputsFingerprint(policies []v1alpha1.RateLimitPolicy, doc config.Document) string {
	h := sha256.New()
	for i := range policies {
		p := &policies[i]
		fmt.Fprintf(h, "%s/%s/%s/%d;", p.Namespace, p.Name, p.UID, p.Generation)
	}
	fa, _ := json.Marshal(doc.ForwardAuth)
	fmt.Fprintf(h, "|%s|%d|%s", doc.Enforcement, doc.Pods, fa)
	return hex.EncodeToString(h.Sum(nil))
}

// SnapshotFits holds, per fleet, the policies its last compiled snapshot
// refused for want of room, and tells subscribers (the policy controller)
// which policies' refusal started, changed or ended. Safe for concurrent
// use; a nil *SnapshotFits refuses nothing.
type SnapshotFits struct {
	mu     sync.Mutex
	fleets map[types.NamespacedName]*fleetFit
	subs   []chan event.GenericEvent
}

type fleetFit struct {
	// fingerprint and kept are the inputs and kept count of the last fit,
	// the hint of the next.
	fingerprint string
	kept        int
	refused     map[types.NamespacedName]refusal
}

// refusal is one refused policy: the generation refused, and why.
type refusal struct {
	generation int64
	message    string
}

// NewSnapshotFits returns an empty SnapshotFits.
func NewSnapshotFits() *SnapshotFits {
	return &SnapshotFits{fleets: map[types.NamespacedName]*fleetFit{}}
}

// Subscribe returns a channel of policy events (namespace and name only),
// sent for each policy whose refusal by some fleet started, changed or
// ended.
func (f *SnapshotFits) Subscribe() <-chan event.GenericEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan event.GenericEvent, 1024)
	f.subs = append(f.subs, ch)
	return ch
}

// hint returns the kept count of the fleet's last fit, or -1 before any,
// and whether its inputs had the same fingerprint (the count is then
// exact).
func (f *SnapshotFits) hint(fleet types.NamespacedName, fingerprint string) (kept int, exact bool) {
	if f == nil {
		return -1, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	last, ok := f.fleets[fleet]
	if !ok {
		return -1, false
	}
	return last.kept, last.fingerprint == fingerprint
}

// publish records a fleet's fit and notifies the policies whose refusal
// changed.
func (f *SnapshotFits) publish(ctx context.Context, fleet types.NamespacedName, fingerprint string, fit *fittedSnapshot) {
	if f == nil {
		return
	}
	next := &fleetFit{fingerprint: fingerprint, kept: len(fit.kept), refused: make(map[types.NamespacedName]refusal, len(fit.refused))}
	msg := snapshotFullMessage(fleet, len(fit.kept), fit.stored)
	for i := range fit.refused {
		p := &fit.refused[i]
		next.refused[client.ObjectKeyFromObject(p)] = refusal{generation: p.Generation, message: msg}
	}
	f.mu.Lock()
	var prev map[types.NamespacedName]refusal
	if last, ok := f.fleets[fleet]; ok {
		prev = last.refused
	}
	f.fleets[fleet] = next
	f.mu.Unlock()
	f.notify(ctx, changedRefusals(prev, next.refused))
}

// forget drops a deleted fleet and notifies the policies it refused.
func (f *SnapshotFits) forget(ctx context.Context, fleet types.NamespacedName) {
	if f == nil {
		return
	}
	f.mu.Lock()
	last, ok := f.fleets[fleet]
	delete(f.fleets, fleet)
	f.mu.Unlock()
	if ok {
		f.notify(ctx, changedRefusals(last.refused, nil))
	}
}

// refusal returns why the fleet refused the given generation of a policy,
// or false when it did not (it kept it, or has not compiled it yet).
func (f *SnapshotFits) refusal(fleet, policy types.NamespacedName, generation int64) (string, bool) {
	if f == nil {
		return "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ff, ok := f.fleets[fleet]
	if !ok {
		return "", false
	}
	r, ok := ff.refused[policy]
	if !ok || r.generation != generation {
		return "", false
	}
	return r.message, true
}

// changedRefusals lists, sorted, the policies refused in one map and not
// the other, or refused in both differently.
func changedRefusals(prev, next map[types.NamespacedName]refusal) []types.NamespacedName {
	var out []types.NamespacedName
	for k, v := range next {
		if old, ok := prev[k]; !ok || old != v {
			out = append(out, k)
		}
	}
	for k := range prev {
		if _, ok := next[k]; !ok {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func (f *SnapshotFits) notify(ctx context.Context, policies []types.NamespacedName) {
	if len(policies) == 0 {
		return
	}
	f.mu.Lock()
	subs := slices.Clone(f.subs)
	f.mu.Unlock()
	for _, key := range policies {
		ev := event.GenericEvent{Object: &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
		for _, ch := range subs {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
}

// fitSnapshot compiles the largest snapshot of the selected policies that
// fits in its ConfigMap, proves the limiters can load it, records it in s,
// and publishes the fleet's refusals.
func (r *LimiterFleetReconciler) fitSnapshot(ctx context.Context, s *fleetScope, selected []v1alpha1.RateLimitPolicy, enforcement config.Enforcement) (*fittedSnapshot, error) {
	base := config.Document{Enforcement: enforcement, ForwardAuth: s.fleet.Spec.ForwardAuth}
	// The pods that share the limits while the store is down: the ready
	// ones, or the desired count before any is ready.
	base.Pods = int32(len(s.endpoints))
	if base.Pods == 0 {
		base.Pods = s.fleet.Spec.EffectiveReplicas()
	}
	build := func(ps []v1alpha1.RateLimitPolicy) builtSnapshot {
		doc := config.DocumentFor(ps, enforcement)
		doc.ForwardAuth, doc.Pods = base.ForwardAuth, base.Pods
		data, version := config.EncodeDocument(doc)
		cm := BuildSnapshotConfigMap(s.fleet, data, version)
		return builtSnapshot{document: data, version: version, cm: cm, stored: configMapDataBytes(cm)}
	}
	key := client.ObjectKeyFromObject(s.fleet)
	ordered := byAge(selected)
	fingerprint := inputsFingerprint(ordered, base)
	hint, exact := r.Fits.hint(key, fingerprint)
	fit := fitSnapshot(ordered, MaxSnapshotBytes, hint, exact, build)
	s.document, s.version = fit.document, fit.version
	s.policies, s.refused = len(fit.kept), len(fit.refused)
	// What the operator writes, the limiters must load: prove it first.
	if _, err := config.ParseDocument(s.document); err != nil {
		return nil, fmt.Errorf("compiling the snapshot: %w", err)
	}
	s.compiled = true
	if len(fit.refused) > 0 && !exact {
		logf.FromContext(ctx).Info("Snapshot full: refusing the newest policies", "kept", len(fit.kept), "refused", len(fit.refused),
			"bytes", fit.stored, "limit", MaxSnapshotBytes)
	}
	r.Fits.publish(ctx, key, fingerprint, &fit)
	return &fit, nil
}
