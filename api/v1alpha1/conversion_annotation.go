/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/conversion"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// The conversion annotations (V1alpha1SpecAnnotation,
// V1beta1SpecAnnotation) are written by the conversion, but anyone who may
// write the object may write them too: a tenant who writes v1alpha1
// RateLimitPolicies can hand-write one. An annotation therefore stands for
// the spec written only when it says the same thing as the plain mapping of
// that spec, up to what the two versions spell differently, and is
// otherwise ignored (and dropped, as a stale one is):
//
//   - it is at most MaxConversionAnnotationBytes and decodes strictly, as
//     one JSON object of the other version's spec with no unknown field;
//   - a v1beta1 spec may differ from the plain mapping only in how a
//     duration is spelled (a valid Gateway API duration of the same value)
//     and in blocks left empty;
//   - a v1alpha1 spec may differ only in what v1beta1 leaves to the fleet
//     or its defaults: the lease entries and priority key (which a tenant
//     may write in v1alpha1 anyway, and which the operator checks against
//     the fleet's spec.entries), soft: false and shadow: false, a disabled localTier, redis
//     mode None left unset, and durations below the millisecond;
//   - and it must still map back to exactly the spec written.
//
// So a hand-written annotation can't lift a limit, change a mode or any
// other field, or store a value the other version's schema would refuse;
// and no annotation, however large or malformed, makes a conversion fail
// or loop: it is read once, with a bounded size.

// MaxConversionAnnotationBytes bounds a conversion annotation: a longer
// one is ignored unread. The largest spec of either kind is far smaller.
const MaxConversionAnnotationBytes = 64 << 10

// decodeStored decodes an annotation's spec into out, strictly.
func decodeStored(value string, out any) bool {
	if len(value) > MaxConversionAnnotationBytes {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return false
	}
	_, err := dec.Token()
	return err == io.EOF
}

// gatewayDuration is v1beta1.Duration's schema pattern.
var gatewayDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

// sameSpelledV1beta1 compares a v1beta1 spec from an annotation with the
// plain mapping: durations by value (each a valid Gateway API duration),
// and an empty optional block as absent.
var sameSpelledV1beta1 conversion.Equalities

func init() {
	e := equality.Semantic.Copy()
	if err := e.AddFuncs(
		func(a, b v1beta1.Duration) bool {
			if a == b {
				return true
			}
			if !gatewayDuration.MatchString(string(a)) || !gatewayDuration.MatchString(string(b)) {
				return false
			}
			da, errA := time.ParseDuration(string(a))
			db, errB := time.ParseDuration(string(b))
			return errA == nil && errB == nil && da == db
		},
		emptyAsNil[v1beta1.Response], emptyAsNil[v1beta1.Cost],
		emptyAsNil[v1beta1.PolicySelection], emptyAsNil[v1beta1.DataPlane], emptyAsNil[v1beta1.ClusterStore],
	); err != nil {
		panic(err)
	}
	sameSpelledV1beta1 = e
}

// emptyAsNil compares two optional blocks, an empty one as absent.
func emptyAsNil[T any](a, b *T) bool {
	var zero T
	if a == nil {
		a = &zero
	}
	if b == nil {
		b = &zero
	}
	return sameSpelledV1beta1.DeepEqual(*a, *b)
}

// subMillisecond compares v1alpha1 durations to the millisecond, which is
// all v1beta1 says.
var subMillisecond = func() conversion.Equalities {
	e := equality.Semantic.Copy()
	if err := e.AddFunc(func(a, b time.Duration) bool {
		return a.Truncate(time.Millisecond) == b.Truncate(time.Millisecond)
	}); err != nil {
		panic(err)
	}
	return e
}()

// policyLeftToFleet returns a copy of a with what v1beta1 leaves to the
// fleet or to defaults set as the plain mapping from v1beta1 sets it.
func policyLeftToFleet(a *RateLimitPolicySpec) RateLimitPolicySpec {
	out := *a.DeepCopy()
	if out.Concurrency != nil {
		out.Concurrency.LeaseEntry = ptrTo(DefaultLeaseEntry)
	}
	if out.Reserve != nil {
		out.Reserve.LeaseEntry = ptrTo(DefaultLeaseEntry)
	}
	if out.Priority != nil {
		out.Priority.Key = DefaultPriorityEntry
	}
	if out.Soft != nil && !*out.Soft {
		out.Soft = nil
	}
	if out.Shadow != nil && !*out.Shadow {
		out.Shadow = nil
	}
	if out.LocalTier != nil && !out.LocalTierEnabled() {
		out.LocalTier = nil
	}
	return out
}

// fleetLeftToDefaults returns a copy of a with redis.mode, which v1beta1
// always says, set as the plain mapping from v1beta1 sets it.
func fleetLeftToDefaults(a *LimiterFleetSpec) LimiterFleetSpec {
	out := *a.DeepCopy()
	if out.Redis.Mode == nil {
		out.Redis.Mode = ptrTo(RedisNone)
	}
	return out
}
