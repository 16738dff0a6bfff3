package localtier

import (
	"time"

	"github.com/sluice-dev/sluice/limiter/store"
)

// Pace is pace for a request of cost that asked for want units, answered
// with pods holding grants on the key.
func Pace(p *Policy, cost, want, pods int64) time.Duration {
	return pace(p, store.GrantRequest{Cost: cost, Want: want}, store.Grant{Pods: pods})
}

// MaxHold is maxHold.
const MaxHold = maxHold
