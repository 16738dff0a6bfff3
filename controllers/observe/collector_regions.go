package observe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// The regions pass: for each fleet with spec.regions, the collector reads
// every ready limiter pod's view of its peers (limiterwire.RegionsPath),
// sums it per peer into status.regions and the RegionsReachable
// condition, and writes them with WriteRegions when they changed: at once
// when the condition changed, else at most once per MinWrite (the last
// exchange moves with every grant call). A fleet that no longer names
// regions has both removed. Work per fleet is bounded by its pods and its
// peers (at most 8, spec.regions.peers' bound; a pod's answer is read up
// to readAnswer's limit and only the peers the spec names are kept).

// Peer reasons, as a limiter reports them (limiter/regions).
const (
	peerReachable     = "Reachable"
	peerNoExchange    = "NoExchangeYet"
	peerUnauthorized  = "Unauthorized"
	peerUnknownRegion = "UnknownRegion"
	peerUnreachable   = "Unreachable"
	maxRegionMessage  = 512
	maxConditionMsg   = 2048
)

// peerFailureRank orders the reasons of a peer not answered, the most
// telling first: a configuration to fix before a network to check.
var peerFailureRank = map[string]int{peerUnauthorized: 0, peerUnknownRegion: 1, peerUnreachable: 3}

// failureReason is the condition reason of a peer reason.
func failureReason(peer string) string {
	switch peer {
	case peerUnauthorized:
		return v1beta1.PeerUnauthorizedReason
	case peerUnknownRegion:
		return v1beta1.PeerUnknownRegionReason
	case peerUnreachable:
		return v1beta1.PeerUnreachableReason
	default:
		return v1beta1.PeerRefusedReason
	}
}

func rank(reason string) int {
	if r, ok := peerFailureRank[reason]; ok {
		return r
	}
	return 2 // Refused, or a reason this operator does not know
}

// podRegions is one pod's answer.
type podRegions struct {
	addr string
	view *limiterwire.Regions
}

// regionsWrite is what the pass last wrote of one fleet.
type regionsWrite struct {
	at time.Time
}

// collectRegions runs the regions pass over the fleets.
func (c *Collector) collectRegions(ctx context.Context, now time.Time) error {
	if c.WriteRegions == nil {
		return nil
	}
	var fleets v1beta1.LimiterFleetList
	if err := c.Client.List(ctx, &fleets); err != nil {
		return err
	}
	if c.regionWrites == nil {
		c.regionWrites = map[types.NamespacedName]regionsWrite{}
	}
	eps := c.Acks.Endpoints()
	var errs []error
	seen := map[types.NamespacedName]bool{}
	for i := range fleets.Items {
		fleet := &fleets.Items[i]
		key := types.NamespacedName{Namespace: fleet.Namespace, Name: fleet.Name}
		seen[key] = true
		spec := resources.RegionsOf(fleet)
		prev := meta.FindStatusCondition(fleet.Status.Conditions, v1beta1.RegionsReachableCondition)
		if spec == nil {
			// Regions removed: so are their status, once per MinWrite at
			// most (a condition another writer took over stays).
			if (prev != nil || fleet.Status.Regions != nil) && now.Sub(c.regionWrites[key].at) >= c.MinWrite && c.writes.AllowN(now, 1) {
				c.regionWrites[key] = regionsWrite{at: now}
				errs = append(errs, c.WriteRegions(ctx, fleet, nil, nil))
			}
			continue
		}
		peers := make([]string, 0, len(spec.Peers))
		for _, p := range spec.Peers {
			peers = append(peers, p.Name)
		}
		answers, unread := c.readRegions(ctx, key, eps[key])
		regions, cond := regionsStatus(peers, answers, unread, len(eps[key]))
		cond.ObservedGeneration = fleet.Generation
		cond.LastTransitionTime = metav1.Time{Time: now.Truncate(time.Second)}
		if prev != nil && prev.Status == cond.Status {
			cond.LastTransitionTime = prev.LastTransitionTime
		}
		condChanged := prev == nil || prev.Status != cond.Status || prev.Reason != cond.Reason || prev.Message != cond.Message || prev.ObservedGeneration != cond.ObservedGeneration
		if !condChanged && equality.Semantic.DeepEqual(regions, fleet.Status.Regions) {
			continue
		}
		if !condChanged && now.Sub(c.regionWrites[key].at) < c.MinWrite {
			continue // only figures moved, and were written recently
		}
		if !c.writes.AllowN(now, 1) {
			continue // over the write budget: a later collection writes it
		}
		if err := c.WriteRegions(ctx, fleet, regions, &cond); err != nil {
			errs = append(errs, fmt.Errorf("writing status.regions of fleet %s: %w", key, err))
			continue
		}
		c.regionWrites[key] = regionsWrite{at: now}
	}
	for key := range c.regionWrites {
		if !seen[key] {
			delete(c.regionWrites, key)
		}
	}
	return errors.Join(errs...)
}

// readRegions reads the view of each of a fleet's pods, in parallel.
func (c *Collector) readRegions(ctx context.Context, fleet types.NamespacedName, eps []string) ([]podRegions, []string) {
	var answers []podRegions
	var unread []string
	var g errgroup.Group
	g.SetLimit(collectParallelism)
	results := make([]podRegions, len(eps))
	errs := make([]error, len(eps))
	for i, addr := range eps {
		g.Go(func() error {
			results[i].addr = addr
			results[i].view, errs[i] = c.readRegionsOf(ctx, fleet, addr)
			return nil
		})
	}
	_ = g.Wait()
	for i := range eps {
		if errs[i] != nil {
			logf.FromContext(ctx).V(1).Info("Limiter pod regions unreadable", "fleet", fleet, "pod", eps[i], "error", errs[i])
			unread = append(unread, eps[i]+": "+truncate(errs[i].Error(), 200))
			continue
		}
		answers = append(answers, results[i])
	}
	slices.SortFunc(answers, func(a, b podRegions) int { return strings.Compare(a.addr, b.addr) })
	slices.Sort(unread)
	return answers, unread
}

// readRegionsOf asks one pod for its view of its peers, within Timeout.
func (c *Collector) readRegionsOf(ctx context.Context, fleet types.NamespacedName, addr string) (*limiterwire.Regions, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	hc, req, err := adminRequest(ctx, c.Admin, c.HTTP, fleet, addr, limiterwire.RegionsPath, "")
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", limiterwire.RegionsPath, resp.Status)
	}
	var out limiterwire.Regions
	if err := readAnswer(resp.Body, &out); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", limiterwire.RegionsPath, err)
	}
	return &out, nil
}

// regionsStatus sums the pods' views into status.regions, one entry per
// peer the spec names (in name order), and the RegionsReachable
// condition (without its times and generation). unread are the pods
// that could not be read, of ready in all.
func regionsStatus(peers []string, answers []podRegions, unread []string, ready int) ([]v1beta1.RegionStatus, metav1.Condition) {
	cond := metav1.Condition{Type: v1beta1.RegionsReachableCondition}
	if len(answers) == 0 {
		cond.Status, cond.Reason = metav1.ConditionUnknown, v1beta1.PodsUnreadReason
		if ready == 0 {
			cond.Message = "no ready limiter pod to read " + limiterwire.RegionsPath + " from"
		} else {
			cond.Message = truncate(fmt.Sprintf("no limiter pod's %s could be read (%d pods), the first: %s", limiterwire.RegionsPath, ready, unread[0]), maxConditionMsg)
		}
		return nil, cond
	}
	peers = slices.Clone(peers)
	slices.Sort(peers)
	peers = slices.Compact(peers)
	out := make([]v1beta1.RegionStatus, 0, len(peers))
	var failing, silent []string
	worst, worstRank := "", len(peerFailureRank)+1
	for _, name := range peers {
		st := v1beta1.RegionStatus{Name: name, Reason: peerNoExchange}
		var fail *limiterwire.RegionPeer
		var failAddr string
		var reached *limiterwire.RegionPeer
		for _, a := range answers {
			i := slices.IndexFunc(a.view.Peers, func(p limiterwire.RegionPeer) bool { return p.Name == name })
			if i < 0 {
				continue // a pod on other flags: it does not know the peer
			}
			p := &a.view.Peers[i]
			st.Pods++
			st.Keys += int64(max(0, p.Keys))
			st.HeldUnits += max(0, p.HeldUnits)
			if !p.LastExchange.IsZero() && (st.LastExchange == nil || p.LastExchange.After(st.LastExchange.Time)) {
				st.LastExchange = &metav1.Time{Time: p.LastExchange.UTC().Truncate(time.Second)}
			}
			switch {
			case p.Reachable:
				if reached == nil || p.Since.After(reached.Since) {
					reached = p // since: when the last of them reached it
				}
			case p.Reason != peerNoExchange && p.Reason != "":
				if fail == nil || rank(p.Reason) < rank(fail.Reason) {
					fail, failAddr = p, a.addr
				}
			}
		}
		switch {
		case fail != nil:
			st.Reason = fail.Reason
			st.Message = truncate(failAddr+": "+fail.Message, maxRegionMessage)
			st.Since = sinceOf(fail.Since)
			failing = append(failing, fmt.Sprintf("peer %s %s: %s", name, fail.Reason, st.Message))
			if r := rank(fail.Reason); r < worstRank {
				worst, worstRank = fail.Reason, r
			}
		case reached != nil:
			st.Reachable, st.Reason = true, peerReachable
			st.Since = sinceOf(reached.Since)
		default:
			silent = append(silent, name)
		}
		out = append(out, st)
	}
	switch {
	case len(failing) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, failureReason(worst)
		cond.Message = truncate(fmt.Sprintf("%d of %d peers not answered; each region keeps limiting from its partition share: %s",
			len(failing), len(peers), strings.Join(failing, "; ")), maxConditionMsg)
	case len(silent) > 0:
		cond.Status, cond.Reason = metav1.ConditionUnknown, v1beta1.NoExchangeYetReason
		cond.Message = truncate("no limiter pod has called peers "+strings.Join(silent, ", ")+" yet: no Global key homed there was asked for", maxConditionMsg)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1beta1.PeersReachableReason
		cond.Message = fmt.Sprintf("every peer answered the last grant call of the %d limiter pods read", len(answers))
	}
	if len(unread) > 0 && cond.Status != metav1.ConditionUnknown {
		cond.Message = truncate(fmt.Sprintf("%s (%d pods unread, the first: %s)", cond.Message, len(unread), unread[0]), maxConditionMsg)
	}
	return out, cond
}

func sinceOf(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t.UTC().Truncate(time.Second)}
}
