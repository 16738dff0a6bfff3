package config

import (
	"fmt"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// PenaltyAnswer is package compiled's.
type PenaltyAnswer = compiled.PenaltyAnswer

// compilePenalty compiles spec.penalty of the policy id, or returns none.
// A hidden policy's default reason does not name it (spec.visibility).
func compilePenalty(p *v1beta1.Penalty, id string, hidden bool) (algo.Penalty, *PenaltyAnswer) {
	if p == nil {
		return algo.Penalty{}, nil
	}
	d := durationOf(&p.Duration, 0)
	pen := algo.Penalty{Duration: d, After: 3, Within: durationOf(p.Within, defaultPenaltyWithin)}
	if p.After != nil {
		pen.After = int64(*p.After)
	}
	ans := &PenaltyAnswer{Status: defaultPenaltyStatus, Reason: fmt.Sprintf("penalized by %s for %s", id, d)}
	if p.Status != nil {
		ans.Status = int(*p.Status)
	}
	if hidden {
		ans.Reason = fmt.Sprintf("penalized for %s", d)
	}
	if p.Reason != nil {
		ans.Reason = *p.Reason
	}
	return pen, ans
}
