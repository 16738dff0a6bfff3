package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/resources"
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
				if c := meta.FindStatusCondition(hub.Status.Conditions, v1beta1.RedisReadyCondition); c != nil {
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

// limiterFailoverLog tells each limiter pod's side of a failover from its
// log since stopped, each as a time after stopped: when it took a shard's
// new primary from the slot map ("Redis shard has a new primary") and when
// that shard first decided again on it, each breaker that opened or
// closed; and for a pod that started again after stopped (a stopped node's,
// back), when it started, installed a slot map, ended its warm-up and
// turned Ready: the node's return, told (issue 43's tail). Reads that fail
// are told as such.
func (j *journey) limiterFailoverLog(stopped time.Time) string {
	ctx := context.Background()
	pods, err := j.c.cs.CoreV1().Pods(j.fleet.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: resources.LabelInstance + "=" + j.fleet.Name + "," + resources.LabelComponent + "=" + resources.LimiterComponent})
	if err != nil {
		return "limiter pods: " + err.Error()
	}
	since := metav1.NewTime(stopped.Add(-time.Second))
	var out []string
	for _, p := range pods.Items {
		raw, err := j.c.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since}).DoRaw(ctx)
		if err != nil {
			out = append(out, p.Name+": "+err.Error())
			continue
		}
		var events []string
		for line := range strings.SplitSeq(string(raw), "\n") {
			var e struct {
				Time    time.Time `json:"time"`
				Msg     string    `json:"msg"`
				Shard   string    `json:"shard"`
				Trigger string    `json:"trigger"`
			}
			if json.Unmarshal([]byte(line), &e) != nil || e.Time.Before(stopped) {
				continue
			}
			at := "+" + e.Time.Sub(stopped).Round(10*time.Millisecond).String()
			switch e.Msg {
			case "Redis shard has a new primary":
				events = append(events, fmt.Sprintf("%s shard %s new primary (on %s)", at, e.Shard, e.Trigger))
			case "Redis shard decides again, on its new primary":
				events = append(events, fmt.Sprintf("%s shard %s first decision on it", at, e.Shard))
			case "Redis shard unavailable: circuit breaker open; its decisions follow each policy's failureMode":
				events = append(events, fmt.Sprintf("%s shard %s breaker open", at, e.Shard))
			case "Redis shard answers again: circuit breaker closed":
				events = append(events, fmt.Sprintf("%s shard %s breaker closed", at, e.Shard))
			case "Starting limiter":
				events = append(events, at+" started")
			case "Redis Cluster shards":
				events = append(events, at+" slot map installed")
			case "Warm-up over: gRPC health follows the snapshot now":
				events = append(events, at+" warm-up over")
			}
		}
		if ready := readySince(&p); startedAfter(&p, stopped) && !ready.IsZero() {
			events = append(events, fmt.Sprintf("ready at +%s", ready.Sub(stopped).Round(10*time.Millisecond)))
		}
		if len(events) == 0 {
			events = []string{"no failover, breaker or start logged"}
		}
		out = append(out, p.Name+": "+strings.Join(events[:min(len(events), 3*maxChainSteps)], ", "))
	}
	slices.Sort(out)
	return strings.Join(out, " | ")
}

// readySince is when p's Ready condition last turned True, or zero.
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
