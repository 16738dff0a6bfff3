package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// maxChainSteps bounds what a failover chain tells.
const maxChainSteps = 12

// agoPart is the part of a lost primary's sentence that changes with
// every pass ("1.5s ago").
var agoPart = regexp.MustCompile(`, [0-9.]+m?s ago`)

// redisReadyChain follows the fleet's RedisReady condition from stopped
// until the returned func is called, and that func tells each change with
// its time after stopped: the operator's account of a failover, as it
// happened (each lost primary, its heir and when it was seen serving,
// after what), next to the load's own figures. Reads that fail are
// skipped: the step tells, it does not judge.
func (j *journey) redisReadyChain(stopped time.Time) func() string {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var steps []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for ctx.Err() == nil {
			hub := &v1beta1.LimiterFleet{}
			if err := j.c.c.Get(ctx, client.ObjectKeyFromObject(j.fleet), hub); err == nil {
				if c := meta.FindStatusCondition(hub.Status.Conditions, v1alpha1.RedisReadyCondition); c != nil {
					now := fmt.Sprintf("%s %s: %s", c.Status, c.Reason, failoverPart(c.Message))
					if now != last {
						last = now
						mu.Lock()
						if len(steps) < maxChainSteps {
							steps = append(steps, "+"+since(stopped)+" "+now)
						}
						mu.Unlock()
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(steps, " | ")
	}
}

// failoverPart is a RedisReady message's lost primaries ("shard 1: ..."),
// without what changes every pass, or its first 100 bytes.
func failoverPart(msg string) string {
	var lost []string
	for part := range strings.SplitSeq(msg, "; ") {
		if !strings.HasPrefix(part, "shard ") {
			break
		}
		lost = append(lost, agoPart.ReplaceAllString(part, ""))
	}
	if len(lost) > 0 {
		return strings.Join(lost, "; ")
	}
	if len(msg) > 100 {
		return msg[:100] + "..."
	}
	return msg
}
