package controllers

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/limiter/config"
)

// verdict is whether one policy is accepted, and why not.
type verdict struct {
	Accepted bool
	Reason   string
	Message  string
}

// decideAcceptance judges every policy: it is accepted when the limiter's
// validation passes, some fleet of tn allows its namespace to use its
// domain (fleetAllows), and no older policy that one of those fleets also
// allows has the same domain and descriptors. Older means created earlier,
// then by namespace/name, so the outcome does not depend on list order.
// Nor may an entry it counts on be the lease entry of an older one of the
// domain, or the other way round (config.EntryConflict): a lease entry
// applies to the whole domain. Policies being deleted take no part. Pure, so both controllers agree
// without reading each other's status.
func decideAcceptance(all []v1beta1.RateLimitPolicy, tn tenancy) map[types.NamespacedName]verdict {
	live := make([]*v1beta1.RateLimitPolicy, 0, len(all))
	for i := range all {
		if all[i].DeletionTimestamp == nil {
			live = append(live, &all[i])
		}
	}
	slices.SortFunc(live, func(a, b *v1beta1.RateLimitPolicy) int {
		if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	out := make(map[types.NamespacedName]verdict, len(live))
	// owner: the accepted policy of each signature, in each fleet that
	// allows it; allowed: the fleets of each namespace and domain.
	owner := map[string]*v1beta1.RateLimitPolicy{}
	// domainPolicies: the accepted policies (defaulted) of each domain, in
	// each fleet that allows them.
	domainPolicies := map[string][]*config.Source{}
	allowed := map[[2]string][]string{}
	for _, p := range live {
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		check, err := limiterSource(p) // limitersource.go: the limiter validates v1beta1
		if err != nil {
			out[key] = verdict{Reason: v1beta1.InvalidSpecReason, Message: err.Error()}
			continue
		}
		config.DefaultPolicy(&check.RateLimitPolicy)
		if errs := config.ValidateSource(&check); len(errs) > 0 {
			out[key] = verdict{Reason: v1beta1.InvalidSpecReason, Message: errs.ToAggregate().Error()}
			continue
		}
		nd := [2]string{p.Namespace, p.Spec.Domain}
		fleets, ok := allowed[nd]
		if !ok {
			fleets = tn.allowedBy(p.Spec.Domain, p.Namespace)
			allowed[nd] = fleets
		}
		if len(fleets) == 0 {
			out[key] = verdict{Reason: v1beta1.DomainNotAllowedReason, Message: tn.notAllowedMessage(p.Spec.Domain, p.Namespace)}
			continue
		}
		sig := config.Signature(&check.Spec)
		var first *v1beta1.RateLimitPolicy
		for _, f := range fleets {
			if first = owner[f+"\x00"+sig]; first != nil {
				break
			}
		}
		if first != nil {
			out[key] = verdict{Reason: v1beta1.ConflictReason, Message: fmt.Sprintf(
				"conflicts with the older policy %s/%s: same domain %q and descriptors", first.Namespace, first.Name, p.Spec.Domain)}
			continue
		}
		if msg := tn.fleetEntryConflict(&check, fleets); msg != "" {
			out[key] = verdict{Reason: v1beta1.ReservedEntryReason, Message: msg}
			continue
		}
		if msg := entryConflict(&check, fleets, domainPolicies); msg != "" {
			out[key] = verdict{Reason: v1beta1.ConflictReason, Message: msg}
			continue
		}
		for _, f := range fleets {
			owner[f+"\x00"+sig] = p
			domainPolicies[f+"\x00"+p.Spec.Domain] = append(domainPolicies[f+"\x00"+p.Spec.Domain], &check)
		}
		out[key] = verdict{Accepted: true, Reason: v1beta1.AcceptedReason, Message: "the policy is valid, its domain is allowed for its namespace, and it has no conflict"}
	}
	return out
}

// entryConflict says why p (defaulted) can't share its domain with the
// older accepted policies of the fleets that allow it, or "".
func entryConflict(p *config.Source, fleets []string, domainPolicies map[string][]*config.Source) string {
	for _, f := range fleets {
		for _, o := range domainPolicies[f+"\x00"+p.Spec.Domain] {
			if msg := config.EntryConflict(p, o, o.Namespace+"/"+o.Name); msg != "" {
				return "conflicts with the older policy " + o.Namespace + "/" + o.Name + ": " + msg
			}
		}
	}
	return ""
}

// fleetEntryConflict says why a fleet of fleets ("namespace/name"), which
// allow p (defaulted), can't serve it: p counts on an entry the fleet
// reserves, or names another lease entry or priority key
// (config.FleetEntryConflict); "" when every fleet can.
func (tn tenancy) fleetEntryConflict(p *config.Source, fleets []string) string {
	for i := range tn.fleets {
		f := &tn.fleets[i]
		name := f.Namespace + "/" + f.Name
		if f.Spec.Entries == nil || !slices.Contains(fleets, name) {
			continue
		}
		if msg := config.FleetEntryConflict(f.Spec.Entries, name, p); msg != "" {
			return msg
		}
	}
	return ""
}

// verdictCache remembers each domain's verdicts for one set of policy
// versions and one tenancy, so that reconciling every policy of a large
// domain (as a fleet event does) validates each policy once, not once per
// reconcile.
type verdictCache struct {
	mu      sync.Mutex
	domains map[string]cachedVerdicts
}

type cachedVerdicts struct {
	fingerprint string
	verdicts    map[types.NamespacedName]verdict
}

func (c *verdictCache) get(domain string, policies []v1beta1.RateLimitPolicy, tn tenancy) map[types.NamespacedName]verdict {
	var b strings.Builder
	keys := make([]string, len(policies))
	namespaces := make([]string, len(policies))
	for i := range policies {
		p := &policies[i]
		keys[i] = fmt.Sprintf("%s/%s/%s/%d/%t", p.Namespace, p.Name, p.UID, p.Generation, p.DeletionTimestamp != nil)
		namespaces[i] = p.Namespace
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(';')
	}
	b.WriteString(tn.fingerprint(namespaces))
	fp := b.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cached, ok := c.domains[domain]; ok && cached.fingerprint == fp {
		return cached.verdicts
	}
	v := decideAcceptance(policies, tn)
	if c.domains == nil {
		c.domains = map[string]cachedVerdicts{}
	}
	c.domains[domain] = cachedVerdicts{fingerprint: fp, verdicts: v}
	return v
}

// fleetSelects reports whether a fleet serves a policy, given the labels
// of the policy's namespace. Nil or empty selectors select everything.
func fleetSelects(fleet *v1beta1.LimiterFleet, p *v1beta1.RateLimitPolicy, nsLabels map[string]string) (bool, error) {
	sel, nsSel := fleetSelectors(fleet)
	ok, err := selectorMatches(nsSel, nsLabels)
	if err != nil || !ok {
		return false, err
	}
	return selectorMatches(sel, p.Labels)
}

// fleetSelectors are a fleet's spec.policies.selector and
// namespaceSelector, nil when unset.
func fleetSelectors(fleet *v1beta1.LimiterFleet) (policies, namespaces *metav1.LabelSelector) {
	if p := fleet.Spec.Policies; p != nil {
		return p.Selector, p.NamespaceSelector
	}
	return nil, nil
}

func selectorMatches(sel *metav1.LabelSelector, set map[string]string) (bool, error) {
	if sel == nil {
		return true, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(set)), nil
}

// fleetView is a fleet with what its ready pods have loaded.
type fleetView struct {
	Fleet   *v1beta1.LimiterFleet
	Version string // the snapshot the operator wrote
	Pods    []observe.PodAck
}

// enforcedCondition computes a policy's Enforced condition: true only when
// every ready limiter pod of every selecting fleet has loaded a snapshot
// holding this generation of the policy.
func enforcedCondition(p *v1beta1.RateLimitPolicy, accepted bool, fleets []fleetView) metav1.Condition {
	c := metav1.Condition{Type: v1beta1.EnforcedCondition, Status: metav1.ConditionFalse, ObservedGeneration: p.Generation}
	switch {
	case !accepted:
		c.Reason, c.Message = v1beta1.NotAcceptedReason, "the policy is not accepted, so no limiter loads it"
		return c
	case len(fleets) == 0:
		c.Reason, c.Message = v1beta1.NoFleetReason, "no LimiterFleet selects this policy"
		return c
	}
	var pending, disabled []string
	for _, f := range fleets {
		// A pod is synced when it holds this generation under the fleet's
		// kill switch: the switch changes the snapshot, not the policy.
		synced, enforcement := 0, string(f.Fleet.Spec.EffectiveEnforcement())
		for _, pod := range f.Pods {
			if pod.Generations[string(p.UID)] == p.Generation && pod.Enforcement == enforcement {
				synced++
			}
		}
		name := f.Fleet.Namespace + "/" + f.Fleet.Name
		if len(f.Pods) == 0 || synced < len(f.Pods) {
			pending = append(pending, fmt.Sprintf("fleet %s: %d/%d pods on snapshot %s", name, synced, len(f.Pods), shortVersion(f.Version)))
		}
		if f.Fleet.Spec.EffectiveEnforcement() == v1beta1.EnforcementDisabled {
			disabled = append(disabled, name)
		}
	}
	switch {
	case len(pending) > 0:
		c.Reason, c.Message = v1beta1.SnapshotPendingReason, strings.Join(pending, "; ")
	case len(disabled) > 0:
		c.Reason, c.Message = v1beta1.EnforcementDisabledReason, "loaded, but enforcement is Disabled on fleet "+strings.Join(disabled, ", ")+": requests are counted, never denied"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1beta1.EnforcedReason
		c.Message = "every ready limiter pod has loaded this generation"
	}
	return c
}

// degradedCondition computes a policy's Degraded condition: true when some
// ready limiter pod recently answered for it by its failure mode, because
// the store could not answer, or when the decisions of the enforcement
// window that the collector wrote into status.enforcement hold such
// answers: a single failed-open decision shows for the whole window.
func degradedCondition(p *v1beta1.RateLimitPolicy, fleets []fleetView) metav1.Condition {
	c := metav1.Condition{Type: v1beta1.DegradedCondition, Status: metav1.ConditionFalse, ObservedGeneration: p.Generation,
		Reason: v1beta1.StoreAvailableReason, Message: "every limiter pod decides against the store"}
	recent := fallbackSummary(p.Status.Enforcement)
	id := p.Namespace + "/" + p.Name
	var parts []string
	storeDown := false
	for _, f := range fleets {
		n, over, mode, overMode := 0, 0, "", ""
		for _, pod := range f.Pods {
			if m, ok := pod.Degraded[id]; ok {
				if m, ok = strings.CutSuffix(m, observe.BudgetExceededMark); ok {
					over++
					overMode = m
				} else {
					n++
					mode = m
				}
			}
		}
		if n > 0 {
			storeDown = true
			parts = append(parts, fmt.Sprintf("fleet %s/%s: %d/%d pods answer by failureMode %s: the store is unavailable",
				f.Fleet.Namespace, f.Fleet.Name, n, len(f.Pods), mode)+redisFailover(f.Fleet))
		}
		if over > 0 {
			// Past the budget, only failureMode Closed answers: the others
			// decide against the store's last denials and the pod's share.
			how := "decide against the store's last denials and their share of the limit"
			if overMode == string(v1beta1.FailClosed) {
				how = "answer by failureMode Closed"
			}
			parts = append(parts, fmt.Sprintf("fleet %s/%s: %d/%d pods %s: namespace %s is over its store budget (spec.tenantBudget.storeCallsPerSecondPerNamespace)",
				f.Fleet.Namespace, f.Fleet.Name, over, len(f.Pods), how, p.Namespace))
		}
	}
	switch {
	case len(parts) > 0 && !storeDown:
		if recent != "" {
			parts = append(parts, recent)
		}
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1beta1.BudgetExceededReason, strings.Join(parts, "; ")
	case len(parts) > 0:
		if recent != "" {
			parts = append(parts, recent)
		}
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1beta1.StoreUnavailableReason, strings.Join(parts, "; ")
	case recent != "":
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1beta1.FallbackDecisionsReason, recent+"; every limiter pod decides against the store again"
	}
	return c
}

// fallbackSummary says how many decisions of the enforcement window were
// answered by the failure mode, or "" when none were.
func fallbackSummary(e *v1beta1.EnforcementStatus) string {
	if e == nil {
		return ""
	}
	open, closed, local := ptr.Deref(e.FailedOpen, 0), ptr.Deref(e.FailedClosed, 0), ptr.Deref(e.LocalFallback, 0)
	if open+closed+local == 0 {
		return ""
	}
	window := "the enforcement window"
	if e.Window != nil {
		window = "the last " + e.Window.Duration.String()
	}
	return fmt.Sprintf("in %s the store could not answer %d decisions: %d failed open (allowed uncounted), %d failed closed (denied), %d decided by the pod's local share",
		window, open+closed+local, open, closed, local)
}

// fallbacksChanged passes the updates of a policy whose window counts of
// failure-mode decisions changed (the collector writes them), for its
// Degraded condition.
var fallbacksChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okO := e.ObjectOld.(*v1beta1.RateLimitPolicy)
		n, okN := e.ObjectNew.(*v1beta1.RateLimitPolicy)
		return okO && okN && fallbackSummary(o.Status.Enforcement) != fallbackSummary(n.Status.Enforcement)
	},
}

func shortVersion(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// redisFailover is what the fleet's RedisReady tells of lost primaries
// ("shard 1: primary ... lost (...), ... serves its slots (seen at ...)"), in
// parentheses to follow a store outage, or "".
func redisFailover(f *v1beta1.LimiterFleet) string {
	c := meta.FindStatusCondition(f.Status.Conditions, v1beta1.RedisReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse {
		return ""
	}
	var lost []string
	for part := range strings.SplitSeq(c.Message, "; ") {
		if !strings.HasPrefix(part, "shard ") {
			break
		}
		lost = append(lost, part)
	}
	if len(lost) == 0 {
		return ""
	}
	return " (Redis Cluster: " + strings.Join(lost, "; ") + ")"
}
