package config

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/algo"
)

// PenaltyAnswer is how a policy answers a penalized request
// (spec.penalty): what counts, and for how long, is the policy's
// Limit.Penalty.
type PenaltyAnswer struct {
	// Status is the HTTP status of the HTTP check and forward-auth.
	Status int
	// Reason is X-Sluice-Reason, and the RLS dynamic metadata's reason.
	Reason string
}

// compilePenalty compiles spec.penalty of the policy id, or returns none.
// A hidden policy's default reason does not name it (spec.visibility).
func compilePenalty(p *v1alpha1.Penalty, id string, hidden bool) (algo.Penalty, *PenaltyAnswer) {
	if p == nil {
		return algo.Penalty{}, nil
	}
	pen := algo.Penalty{Duration: p.Duration.Duration, After: int64(p.EffectiveAfter()), Within: p.EffectiveWithin()}
	ans := &PenaltyAnswer{Status: int(p.EffectiveStatus()), Reason: fmt.Sprintf("penalized by %s for %s", id, p.Duration.Duration)}
	if hidden {
		ans.Reason = fmt.Sprintf("penalized for %s", p.Duration.Duration)
	}
	if p.Reason != nil {
		ans.Reason = *p.Reason
	}
	return pen, ans
}
