package config

import (
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Entries that steer the limiter. A holding policy's lease entry
// (spec.concurrency.leaseEntry or spec.reserve.leaseEntry) applies to its
// whole domain: a descriptor that carries it ends holdings, and one whose
// value is no lease ID is refused. So within a domain, no policy may count
// on an entry (a descriptor key, or spec.priority.key) that another
// policy's lease entry names: a tenant sharing the domain could otherwise
// set its lease entry to, say, user_id, and turn every request that
// carries user_id into a refused one.

// countedEntries are the entry keys p's counters and priorities read.
func countedEntries(p *Source) []string {
	keys := make([]string, 0, len(p.Spec.Descriptors)+1)
	for _, d := range p.Spec.Descriptors {
		keys = append(keys, d.Key)
	}
	if ps, _ := priorityOf(&p.Spec); ps != nil {
		keys = append(keys, priorityKeyOf(p.Entries))
	}
	return keys
}

// EntryConflict says why policy p can't share its domain with the policy
// other (named otherName) of the same domain: an entry one counts on is
// the other's lease entry. It returns "" when they can.
func EntryConflict(p, other *Source, otherName string) string {
	if p.Spec.Domain != other.Spec.Domain {
		return ""
	}
	if le, holds := leaseEntryOf(&p.Spec, p.Entries); holds && slices.Contains(countedEntries(other), le) {
		return fmt.Sprintf("its lease entry %q (LimiterFleet spec.entries.lease, sluice_lease by default) is an entry that policy %s counts on "+
			"in domain %q: a lease entry applies to the whole domain, and a request that carries it would end holdings instead of being counted; choose another lease entry",
			le, otherName, p.Spec.Domain)
	}
	if le, holds := leaseEntryOf(&other.Spec, other.Entries); holds && slices.Contains(countedEntries(p), le) {
		return fmt.Sprintf("it counts on the entry %q (spec.descriptors or its priority key), which is the lease entry of policy %s in domain %q: "+
			"a lease entry applies to the whole domain, and a request that carries it would end holdings instead of being counted; use another key",
			le, otherName, p.Spec.Domain)
	}
	return ""
}

// ForwardAuthEntryConflict says why forward-auth mapping m can't serve the
// domain of policy p (named name): m fills an entry that steers the
// limiter from what a client sends. Forward-auth refuses a mapping onto a
// lease entry, however it is filled (a client would end holdings), and a
// mapping from a request header onto a priority key (a client would
// choose its own priority). It returns "" when m may serve the domain.
func ForwardAuthEntryConflict(m *v1beta1.ForwardAuth, p *Source, name string) string {
	if m.Domain != p.Spec.Domain {
		return ""
	}
	le, holds := leaseEntryOf(&p.Spec, p.Entries)
	ps, _ := priorityOf(&p.Spec)
	for _, d := range m.Descriptors {
		switch {
		case holds && d.Key == le:
			return fmt.Sprintf("the forwardAuth mapping of domain %q builds the entry %q, the lease entry of policy %s: a client would end holdings; rename the entry",
				m.Domain, d.Key, name)
		case ps != nil && d.Key == priorityKeyOf(p.Entries) && d.From == v1beta1.FromHeader:
			return fmt.Sprintf("the forwardAuth mapping of domain %q fills the entry %q, the priority key of policy %s, from the request header %q: "+
				"a client would choose its own priority; fill it from the gateway's authenticated identity (a header the gateway sets after authentication, "+
				"which forward-auth can't tell from a client's), or rename the entry", m.Domain, d.Key, name, *d.Header)
		}
	}
	return ""
}

// checkEntries refuses policies (defaulted) of which one counts on
// another's lease entry in their domain.
func checkEntries(policies []*Policy) error {
	for i, p := range policies {
		for _, o := range policies[:i] {
			if msg := EntryConflict(sourceOf(p), sourceOf(o), o.ID()); msg != "" {
				return fmt.Errorf("%s: %s", p.ID(), msg)
			}
		}
	}
	return nil
}

// checkForwardAuthEntries refuses forward-auth mappings that fill an entry
// that steers the limiter (ForwardAuthEntryConflict) of snap's policies.
func checkForwardAuthEntries(snap *Snapshot, mappings []v1beta1.ForwardAuth) error {
	for i := range mappings {
		for _, p := range snap.Policies {
			if msg := ForwardAuthEntryConflict(&mappings[i], sourceOf(p), p.ID()); msg != "" {
				return fmt.Errorf("spec.dataPlane.forwardAuth[%d]: %s", i, msg)
			}
		}
	}
	return nil
}

// FleetEntryConflict says why policy p can't be served by the fleet
// fleetName, which declares the entries e (LimiterFleet spec.entries): it
// counts on a declared entry, or names another lease entry or priority
// key than the fleet's. It returns "" when it can be served, as always
// when e is nil.
func FleetEntryConflict(e *v1beta1.FleetEntries, fleetName string, p *Source) string {
	if e == nil {
		return ""
	}
	declared := []struct {
		name  *string
		field string
	}{{e.Lease, "spec.entries.lease"}, {e.Idempotency, "spec.entries.idempotency"}, {e.Priority, "spec.entries.priority"}, {e.Accept, "spec.entries.accept"}}
	for i, d := range p.Spec.Descriptors {
		for _, r := range declared {
			if r.name != nil && d.Key == *r.name {
				return fmt.Sprintf("spec.descriptors[%d].key %q is an entry that LimiterFleet %s reserves (%s): it steers the limiter and is never counted; use another key",
					i, d.Key, fleetName, r.field)
			}
		}
	}
	if le, holds := leaseEntryOf(&p.Spec, p.Entries); holds && e.Lease != nil && le != *e.Lease {
		return fmt.Sprintf("the policy's lease entry %q (spec.concurrency.leaseEntry or spec.reserve.leaseEntry in v1alpha1, sluice_lease by default) is not the one LimiterFleet %s declares "+
			"for its domains (spec.entries.lease: %q): set it to %q", le, fleetName, *e.Lease, *e.Lease)
	}
	if ps, _ := priorityOf(&p.Spec); ps != nil {
		key := priorityKeyOf(p.Entries)
		if e.Priority != nil && key != *e.Priority {
			return fmt.Sprintf("the policy's priority key %q (spec.priority.key in v1alpha1, priority by default) is not the priority entry LimiterFleet %s declares for its domains (spec.entries.priority: %q): set it to %q",
				key, fleetName, *e.Priority, *e.Priority)
		}
		for _, r := range []struct {
			name  *string
			field string
		}{declared[0], declared[1], declared[3]} {
			if r.name != nil && key == *r.name {
				return fmt.Sprintf("the policy's priority key %q is an entry that LimiterFleet %s reserves (%s): use another key", key, fleetName, r.field)
			}
		}
	}
	return ""
}

// checkFleetEntries refuses snap's policies that a policy file's
// LimiterFleet, named fleetName, can't serve (FleetEntryConflict).
func checkFleetEntries(snap *Snapshot, e *v1beta1.FleetEntries, fleetName string) error {
	for _, p := range snap.Policies {
		if msg := FleetEntryConflict(e, fleetName, sourceOf(p)); msg != "" {
			return fmt.Errorf("%s: %s", p.ID(), msg)
		}
	}
	return nil
}
