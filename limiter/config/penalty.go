package config

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// PenaltyAnswer is package compiled's.
type PenaltyAnswer = compiled.PenaltyAnswer

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
