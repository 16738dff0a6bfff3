package config

import (
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// Messages of the CEL rules of LimiterFleet.spec.forwardAuth, repeated word
// for word.
const (
	forwardAuthHeaderRequiredMsg = "header is required when from is Header"
	forwardAuthHeaderOnlyMsg     = "header applies only when from is Header"
	forwardAuthDenyStatusMsg     = "denyStatus must be a 4xx status, from 400 to 499"
)

// Bounds and defaults of the v1beta1 LimiterFleet CRD's
// spec.dataPlane.forwardAuth.
const (
	headerNamePattern            = `^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	maxForwardAuthDomains        = 64
	maxHeaderNameLength          = 256
	defaultForwardAuthDenyStatus = int32(429)
	minForwardAuthDenyStatus     = int32(400)
	maxForwardAuthDenyStatus     = int32(499)
)

var (
	headerNameRE          = regexp.MustCompile(headerNamePattern)
	forwardAuthSources    = []v1beta1.ForwardAuthSource{v1beta1.FromMethod, v1beta1.FromPath, v1beta1.FromHost, v1beta1.FromClientIP, v1beta1.FromHeader}
	forwardAuthPathCases  = []v1beta1.ForwardAuthPathCase{v1beta1.PathCaseSensitive, v1beta1.PathCaseInsensitive}
	forwardAuthOnMissings = []v1beta1.ForwardAuthOnMissing{v1beta1.OnMissingAllow, v1beta1.OnMissingDeny}
	enforcementModes      = []v1beta1.EnforcementMode{v1beta1.EnforcementEnabled, v1beta1.EnforcementDisabled}
)

// DefaultForwardAuth returns a copy of mappings with the API server's
// defaults set (onMissing Allow, denyStatus 429), sorted by domain.
func DefaultForwardAuth(mappings []v1beta1.ForwardAuth) []v1beta1.ForwardAuth {
	if len(mappings) == 0 {
		return nil
	}
	out := make([]v1beta1.ForwardAuth, len(mappings))
	for i := range mappings {
		m := mappings[i].DeepCopy()
		if m.OnMissing == nil {
			m.OnMissing = ptr.To(v1beta1.OnMissingAllow)
		}
		if m.DenyStatus == nil {
			m.DenyStatus = ptr.To(defaultForwardAuthDenyStatus)
		}
		out[i] = *m
	}
	slices.SortStableFunc(out, func(a, b v1beta1.ForwardAuth) int { return strings.Compare(a.Domain, b.Domain) })
	return out
}

// ValidateForwardAuth checks mappings against the rules the LimiterFleet CRD
// enforces on spec.forwardAuth, with the API server's field paths and
// messages, so that a policy file and a fleet meet the same bar.
func ValidateForwardAuth(mappings []v1beta1.ForwardAuth, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(mappings) > maxForwardAuthDomains {
		errs = append(errs, field.TooMany(fld, len(mappings), maxForwardAuthDomains))
	}
	seen := map[string]bool{}
	for i := range mappings {
		m, idx := &mappings[i], fld.Index(i)
		if seen[m.Domain] {
			errs = append(errs, field.Duplicate(idx, fmt.Sprintf("domain %q", m.Domain)))
		}
		seen[m.Domain] = true
		errs = append(errs, validatePolicyString(m.Domain, true, maxDomainLength, idx.Child("domain"))...)
		errs = append(errs, validateForwardAuthDescriptors(m.Descriptors, idx.Child("descriptors"))...)
		if m.OnMissing != nil && !slices.Contains(forwardAuthOnMissings, *m.OnMissing) {
			errs = append(errs, field.NotSupported(idx.Child("onMissing"), *m.OnMissing, forwardAuthOnMissings))
		}
		if s := m.DenyStatus; s != nil && (*s < minForwardAuthDenyStatus || *s > maxForwardAuthDenyStatus) {
			errs = append(errs, field.Invalid(idx.Child("denyStatus"), *s, forwardAuthDenyStatusMsg))
		}
		if c := m.PathCase; c != nil && !slices.Contains(forwardAuthPathCases, *c) {
			errs = append(errs, field.NotSupported(idx.Child("pathCase"), *c, forwardAuthPathCases))
		}
	}
	return errs
}

func validateForwardAuthDescriptors(ds []v1beta1.ForwardAuthDescriptor, fld *field.Path) field.ErrorList {
	if errs := validateDescriptorCount(len(ds), fld); errs != nil {
		return errs
	}
	var errs field.ErrorList
	seen := map[string]bool{}
	for i := range ds {
		d, idx := &ds[i], fld.Index(i)
		if seen[d.Key] {
			errs = append(errs, field.Duplicate(idx, fmt.Sprintf("key %q", d.Key)))
		}
		seen[d.Key] = true
		errs = append(errs, validatePolicyString(d.Key, true, maxDescriptorKeyLength, idx.Child("key"))...)
		switch {
		case d.From == "":
			errs = append(errs, field.Required(idx.Child("from"), ""))
		case !slices.Contains(forwardAuthSources, d.From):
			errs = append(errs, field.NotSupported(idx.Child("from"), d.From, forwardAuthSources))
		}
		switch {
		case d.From == v1beta1.FromHeader && d.Header == nil:
			errs = append(errs, field.Required(idx.Child("header"), forwardAuthHeaderRequiredMsg))
		case d.From != v1beta1.FromHeader && d.Header != nil:
			errs = append(errs, field.Forbidden(idx.Child("header"), forwardAuthHeaderOnlyMsg))
		}
		if d.Header != nil {
			h := *d.Header
			errs = append(errs, validatePolicyString(h, false, maxHeaderNameLength, idx.Child("header"))...)
			if h != "" && !headerNameRE.MatchString(h) {
				errs = append(errs, field.Invalid(idx.Child("header"), h, "should match '"+headerNamePattern+"'"))
			}
		}
	}
	return errs
}

// setForwardAuth compiles mappings, defaulted and sorted by domain, into
// snap, each with the conflict forward-auth refuses it for
// (ForwardAuthEntryConflict against the policies of its domain), and
// keeps them as the snapshot's source for its document.
func setForwardAuth(snap *Snapshot, mappings []v1beta1.ForwardAuth) {
	snap.Source = mappings
	snap.ForwardAuth = make([]compiled.ForwardAuth, len(mappings))
	for i := range mappings {
		m := &mappings[i]
		out := compiled.ForwardAuth{Domain: m.Domain, Descriptors: make([]compiled.ForwardAuthDescriptor, len(m.Descriptors)),
			DenyOnMissing: m.OnMissing != nil && *m.OnMissing == v1beta1.OnMissingDeny,
			FoldPathCase:  m.PathCase != nil && *m.PathCase == v1beta1.PathCaseInsensitive}
		if m.DenyStatus != nil {
			out.DenyStatus = int(*m.DenyStatus)
		}
		for j, d := range m.Descriptors {
			out.Descriptors[j] = compiled.ForwardAuthDescriptor{Key: d.Key, From: compiled.ForwardAuthSource(d.From)}
			if d.Header != nil {
				out.Descriptors[j].Header = *d.Header
			}
		}
		if d := snap.Domain(m.Domain); d != nil {
			for _, p := range d.Policies {
				if out.Conflict = ForwardAuthEntryConflict(m, sourceOf(p), p.ID()); out.Conflict != "" {
					break
				}
			}
		}
		snap.ForwardAuth[i] = out
	}
}

// forwardAuthSource is the defaulted forward-auth mappings snap was
// compiled from.
func forwardAuthSource(snap *Snapshot) []v1beta1.ForwardAuth {
	m, _ := snap.Source.([]v1beta1.ForwardAuth)
	return m
}

// applyFleet sets what a policy file's LimiterFleet configures (its
// enforcement and forwardAuth) on snap, and renews its version, refusing
// policies its spec.entries rule out and forward-auth mappings onto
// entries that steer the limiter. (Its spec.entries.idempotency is only
// reserved: a standalone limiter's idempotency entry is its
// --idempotency-entry.) The other
// fields of the fleet describe pods and Redis, which a standalone limiter
// takes from its flags: they are logged and ignored.
func applyFleet(snap *Snapshot, f *v1beta1.LimiterFleet, where string) error {
	fld := field.NewPath("spec")
	var mappings []v1beta1.ForwardAuth
	if dp := f.Spec.DataPlane; dp != nil {
		mappings = dp.ForwardAuth
	}
	errs := ValidateForwardAuth(mappings, fld.Child("dataPlane", "forwardAuth"))
	if e := f.Spec.Enforcement; e != nil && !slices.Contains(enforcementModes, *e) {
		errs = append(errs, field.NotSupported(fld.Child("enforcement"), *e, enforcementModes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s (LimiterFleet %s/%s): %v", where, f.Namespace, f.Name, errs.ToAggregate())
	}
	if err := checkFleetEntries(snap, f.Spec.Entries, f.Namespace+"/"+f.Name); err != nil {
		return fmt.Errorf("%s (LimiterFleet %s/%s): %w", where, f.Namespace, f.Name, err)
	}
	if err := checkForwardAuthEntries(snap, mappings); err != nil {
		return fmt.Errorf("%s (LimiterFleet %s/%s): %w", where, f.Namespace, f.Name, err)
	}
	if ignored := ignoredFleetFields(&f.Spec); len(ignored) > 0 {
		slog.Info("A policy file's LimiterFleet configures only enforcement and forwardAuth; ignoring the rest",
			"where", where, "fleet", f.Namespace+"/"+f.Name, "ignored", ignored)
	}
	if e := f.Spec.Enforcement; e != nil && *e == v1beta1.EnforcementDisabled {
		snap.Enforcement = EnforcementDisabled
	}
	setForwardAuth(snap, DefaultForwardAuth(mappings))
	snap.Version = hash(snap)
	return nil
}

// ignoredFleetFields names the set fields of a fleet that a standalone
// limiter ignores.
func ignoredFleetFields(s *v1beta1.LimiterFleetSpec) []string {
	var out []string
	dp := s.DataPlane
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"limiters", !reflect.ValueOf(s.Limiters).IsZero()},
		{"policies", s.Policies != nil},
		{"domains", len(s.Domains) > 0},
		{"tenantBudget", s.TenantBudget != nil},
		{"dataPlane.clients", dp != nil && len(dp.Clients) > 0},
		{"dataPlane.trustedProxies", dp != nil && len(dp.TrustedProxies) > 0},
		{"store", !reflect.ValueOf(s.Store).IsZero()},
		{"stats", s.Stats != nil},
		{"tracing", s.Tracing != nil},
		{"regions", s.Regions != nil},
	} {
		if f.set {
			out = append(out, "spec."+f.name)
		}
	}
	return out
}
