// Package observe watches the limiter pods of every fleet from the operator:
// which snapshot each ready pod has loaded and whether its store answers
// (AckTracker, acktracker.go and acktracker_poll.go: one long poll per pod),
// what each policy decided over a window (Collector, collector*.go, which
// writes status.enforcement through the function it is given), and which
// endpoints are a fleet's own pods at all (podtrust.go). It calls the pods'
// admin plane over HTTPS with each fleet's CA (AdminClients,
// adminclients.go). The reconcilers in controllers read what it saw; it
// reconciles nothing.
package observe

import (
	"time"
)

// PodAck is what one ready limiter pod reports having loaded.
type PodAck struct {
	// Addr identifies the pod (its endpoint address).
	Addr string
	// Answered is false until the pod's admin endpoint has answered.
	Answered bool
	// Version is the loaded snapshot version ("" before any).
	Version string
	// Enforcement is the loaded snapshot's kill switch, Enabled or
	// Disabled ("" before any).
	Enforcement string
	// Generations maps policy UID to the generation the pod holds.
	Generations map[string]int64
	// Err is the pod's last load error, if any.
	Err string
	// Degraded maps "namespace/name" of the policies the pod answered by
	// their failure mode recently (the store could not answer) to the mode.
	Degraded map[string]string
	// StoreErr is why the pod's counter store does not answer (its ping
	// failed, or a breaker is open), or "".
	StoreErr string
	// CheckedAt is when the operator sent the request the pod last
	// answered: its store check (StoreErr) ran after that.
	CheckedAt time.Time
}
