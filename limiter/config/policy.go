package config

import (
	"fmt"
	"regexp"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Source is a policy as the limiter validates and compiles it: a v1beta1
// RateLimitPolicy, and beside it the lease entry and priority key it
// counts on where they are not the defaults (sluice_lease, priority).
// v1beta1 leaves those two to the fleet (LimiterFleet spec.entries); a
// v1alpha1 policy in a policy file names them itself, and the API package
// (api/convert) converts it to a v1beta1 policy and these entries. Entries
// takes only lease and priority; nil means the defaults.
type Source struct {
	v1beta1.RateLimitPolicy
	Entries *v1beta1.FleetEntries
}

// Defaults and bounds of a v1beta1 RateLimitPolicySpec, as its CRD's
// markers and rules set them.
const (
	defaultLeaseEntry    = "sluice_lease"
	defaultPriorityEntry = "priority"
	defaultTimeZone      = "UTC"

	maxDomainLength          = 253
	maxDescriptors           = 8
	maxDescriptorKeyLength   = 253
	maxDescriptorValueLength = 1024
	maxLimit                 = 1_000_000_000
	maxSlidingLogLimit       = 10_000
	maxInFlight              = 10_000
	maxOvershootCount        = 1_000_000_000
	maxTimeZoneLength        = 64
	maxPriorityLevels        = 16
	maxPriorityValueLength   = 253
	maxPriorityShare         = 100
	maxPenaltyAfter          = 1000
	minPenaltyStatus         = 400
	maxPenaltyStatus         = 599
	maxPenaltyReasonLength   = 256
	maxProblemDetailLength   = 256
	maxRequestOverride       = 1_000_000_000

	minPeriod, maxPeriod             = time.Second, 720 * time.Hour
	minLocalTierTTL, maxLocalTierTTL = 100 * time.Millisecond, time.Minute
	maxLeaseDuration                 = 24 * time.Hour
	minExpireAfter, maxExpireAfter   = time.Second, 24 * time.Hour
	minPenalty, maxPenalty           = time.Second, 720 * time.Hour
	defaultPenaltyWithin             = time.Minute
	defaultPenaltyStatus             = 403
)

// gepDuration is the pattern of v1beta1.Duration (the Gateway API's
// duration format), which the API server enforces and time.ParseDuration
// alone does not (it takes 1.5s).
var gepDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

// parseDuration reads a v1beta1 duration.
func parseDuration(d v1beta1.Duration) (time.Duration, error) {
	if !gepDuration.MatchString(string(d)) {
		return 0, fmt.Errorf("%q is not a duration of the form 30s, 1m or 1h30m (one to four parts of 1-5 digits and h, m, s or ms)", d)
	}
	return time.ParseDuration(string(d))
}

// durationOf is d, a duration validation admitted, or def when d is nil.
func durationOf(d *v1beta1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	v, err := parseDuration(*d)
	if err != nil {
		panic(fmt.Sprintf("config: a duration validation admitted: %v", err))
	}
	return v
}

// canonicalDuration spells d in the Gateway API's format, as the API's
// conversion does (1m, never 60s), so that equal policies encode equally.
func canonicalDuration(d *v1beta1.Duration) {
	v, err := parseDuration(*d)
	if err != nil || v <= 0 {
		return
	}
	var s string
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := v / u.unit; n > 0 {
			s += fmt.Sprintf("%d%s", n, u.name)
			v -= n * u.unit
		}
	}
	if v == 0 {
		*d = v1beta1.Duration(s)
	}
}

// DefaultPolicy sets the fields the API server would default on admission
// (mode, failureMode, the rate's algorithm, cost.reserve.expireAfter,
// localTier.ttl, concurrency.leaseDuration, penalty.after), spells
// durations canonically, and sets an empty namespace to "default", as
// kubectl does. burst and cost.max stay unset.
func DefaultPolicy(p *v1beta1.RateLimitPolicy) {
	if p.Namespace == "" {
		p.Namespace = metav1.NamespaceDefault
	}
	s := &p.Spec
	if s.Mode == nil {
		s.Mode = ptr.To(v1beta1.Enforce)
	}
	if s.FailureMode == nil {
		s.FailureMode = ptr.To(v1beta1.FailOpen)
	}
	if c := s.Limit.Concurrency; c != nil {
		if c.LeaseDuration == nil {
			c.LeaseDuration = ptr.To(v1beta1.Duration("5m"))
		}
		canonicalDuration(c.LeaseDuration)
	}
	if r := s.Limit.Rate; r != nil {
		defaultRate(r)
	}
}

func defaultRate(r *v1beta1.RateLimit) {
	if r.Algorithm == nil {
		r.Algorithm = ptr.To(v1beta1.TokenBucket)
	}
	if r.Period != nil {
		canonicalDuration(r.Period)
	}
	if c := r.Cost; c != nil && c.Reserve != nil {
		if c.Reserve.ExpireAfter == nil {
			c.Reserve.ExpireAfter = ptr.To(v1beta1.Duration("10m"))
		}
		canonicalDuration(c.Reserve.ExpireAfter)
	}
	if t := r.LocalTier; t != nil {
		if t.TTL == nil {
			t.TTL = ptr.To(v1beta1.Duration("2s"))
		}
		canonicalDuration(t.TTL)
	}
	if pen := r.Penalty; pen != nil {
		if pen.After == nil {
			pen.After = ptr.To(int32(3))
		}
		canonicalDuration(&pen.Duration)
		if pen.Within != nil {
			canonicalDuration(pen.Within)
		}
	}
}

// The readers below take a spec validation admitted, defaulted or not.

func isConcurrency(s *v1beta1.RateLimitPolicySpec) bool {
	return s.Limit.Type == v1beta1.LimitConcurrency
}

// algorithmOf is the rate's algorithm (TokenBucket by default), or
// "Concurrency", as package algo names them.
func algorithmOf(s *v1beta1.RateLimitPolicySpec) string {
	switch r := s.Limit.Rate; {
	case isConcurrency(s):
		return string(v1beta1.LimitConcurrency)
	case r == nil || r.Algorithm == nil:
		return string(v1beta1.TokenBucket)
	default:
		return string(*r.Algorithm)
	}
}

func reserveOf(s *v1beta1.RateLimitPolicySpec) *v1beta1.Reserve {
	if r := s.Limit.Rate; r != nil && r.Cost != nil {
		return r.Cost.Reserve
	}
	return nil
}

func penaltyOf(s *v1beta1.RateLimitPolicySpec) *v1beta1.Penalty {
	if r := s.Limit.Rate; r != nil {
		return r.Penalty
	}
	return nil
}

// priorityOf is the rate's or the concurrency limit's priority levels, and
// the path of the field.
func priorityOf(s *v1beta1.RateLimitPolicySpec) (*v1beta1.PriorityShedding, string) {
	if c := s.Limit.Concurrency; isConcurrency(s) && c != nil {
		return c.Priority, "concurrency"
	}
	if r := s.Limit.Rate; r != nil {
		return r.Priority, "rate"
	}
	return nil, "rate"
}

func modeIs(s *v1beta1.RateLimitPolicySpec, m v1beta1.Mode) bool {
	return s.Mode != nil && *s.Mode == m
}

func isHidden(s *v1beta1.RateLimitPolicySpec) bool {
	return s.Response != nil && s.Response.Visibility != nil && *s.Response.Visibility == v1beta1.Hidden
}

// leaseEntryOf is the entry key that ends a request's holding on the
// policy (a Concurrency lease, or a reservation), and false for a policy
// that holds nothing.
func leaseEntryOf(s *v1beta1.RateLimitPolicySpec, e *v1beta1.FleetEntries) (string, bool) {
	if !isConcurrency(s) && reserveOf(s) == nil {
		return "", false
	}
	if e != nil && e.Lease != nil {
		return *e.Lease, true
	}
	return defaultLeaseEntry, true
}

// priorityKeyOf is the entry key of a request's priority.
func priorityKeyOf(e *v1beta1.FleetEntries) string {
	if e != nil && e.Priority != nil {
		return *e.Priority
	}
	return defaultPriorityEntry
}

// overshootBound is the overshoot maxOvershoot allows for limit, in units,
// and false when it is unset.
func overshootBound(o *intstr.IntOrString, limit int64) (int64, bool) {
	if o == nil {
		return 0, false
	}
	if o.Type == intstr.Int {
		return int64(o.IntVal), true
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(o, int(limit), false)
	if err != nil {
		return 0, false
	}
	return int64(v), true
}
