package main

import (
	"flag"
	"fmt"
	"time"
)

// leaderTiming is the leader election's timing, as kube-controller-manager
// names it: how long a Lease holds without renewal (the longest a standby
// waits when the leader dies without releasing it, as on a lost node), how
// long the leader keeps failing to renew before it stops leading, and how
// often every replica tries.
type leaderTiming struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// leaderTimingFlags defines the leader election's timing flags, with
// controller-runtime's defaults (15s, 10s, 2s).
func leaderTimingFlags(fs *flag.FlagSet) *leaderTiming {
	l := &leaderTiming{}
	fs.DurationVar(&l.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long the leader election Lease holds without renewal: after a leader dies without releasing it (its node lost), the standby leads this long after its last renewal; shorter fails over sooner and renews more often")
	fs.DurationVar(&l.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew the Lease before it stops leading (and the process exits); below --leader-elect-lease-duration")
	fs.DurationVar(&l.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often each replica tries to take or renew the Lease; --leader-elect-renew-deadline must exceed 1.2 times it")
	return l
}

// validate names what client-go's elector would refuse, by flag: the
// renewal must have time for a retry (client-go adds up to 20% jitter to
// the period) and end before the Lease does.
func (l leaderTiming) validate() error {
	switch {
	case l.RetryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period is %v: it must be above 0", l.RetryPeriod)
	case float64(l.RenewDeadline) <= 1.2*float64(l.RetryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline (%v) must be more than 1.2 times --leader-elect-retry-period (%v)", l.RenewDeadline, l.RetryPeriod)
	case l.LeaseDuration <= l.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%v) must be more than --leader-elect-renew-deadline (%v)", l.LeaseDuration, l.RenewDeadline)
	}
	return nil
}
