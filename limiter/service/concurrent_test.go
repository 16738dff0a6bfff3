package service_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// The seams of concurrent descriptors (concurrent.go, issue 42): a
// request's descriptors decided concurrently on a real Redis must answer
// as the serial path does on the same Redis, whatever the goroutines'
// order.

// serialStore hides a store's store.Gatherer: a service on it decides
// every request's descriptors serially, one after another.
type serialStore struct{ store.Store }

// seamPair is two services of one snapshot on one real redis-server,
// under their own key prefixes: gathered decides a request's descriptors
// concurrently, serial one after another. Their store budgets run on
// one clock, stopped at the start, that the test moves (now), and meter
// a key by the same shares (their keyed hashes are the same).
func seamPair(t *testing.T, snap *config.Snapshot) (gathered, serial *service.Service, now *atomic.Int64) {
	t.Helper()
	srv := redistest.Start(t)
	now = &atomic.Int64{}
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	svc := func(prefix string, wrap func(store.Store) store.Store) *service.Service {
		rs, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		s := service.New(wrap(rs), service.Options{Registerer: prometheus.NewRegistry(), Fallback: memoryStore(t)})
		service.SetClock(s, clock)
		s.Swap(snap)
		return s
	}
	gathered = svc("gathered", func(st store.Store) store.Store { return st })
	serial = svc("serial", func(st store.Store) store.Store { return serialStore{st} })
	service.SameBudgetHash(serial, gathered)
	return gathered, serial, now
}

// seamSnapshot is one policy per failure mode (Closed, Local, Open,
// Closed) in namespace shared, domain seams, policy i on entry k<i>, 100
// an hour, under a store budget of rate calls a second.
func seamSnapshot(t *testing.T, rate int32) *config.Snapshot {
	t.Helper()
	var ps []v1alpha1.RateLimitPolicy
	for i, mode := range []v1alpha1.FailureMode{v1alpha1.FailClosed, v1alpha1.FailLocal, v1alpha1.FailOpen, v1alpha1.FailClosed} {
		ps = append(ps, v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: fmt.Sprint("p", i)},
			Spec: v1alpha1.RateLimitPolicySpec{Domain: "seams", Descriptors: []v1alpha1.Descriptor{{Key: fmt.Sprint("k", i)}},
				FailureMode: ptr.To(mode), Rate: v1alpha1.Rate{Limit: 100, Period: metav1.Duration{Duration: time.Hour}}}})
	}
	snap, err := policytest.Compile(ps)
	if err != nil {
		t.Fatal(err)
	}
	snap.Budgets = &config.Budgets{Default: config.NamespaceBudget{MaxPoliciesPerRequest: 8, StoreCallsPerSecond: rate}}
	return snap
}

// seamRequest has one descriptor for each of seamSnapshot's policies,
// for user u, each with the idempotency key idem (none when empty).
func seamRequest(u, idem string) *service.Request {
	req := &service.Request{Domain: "seams", IdempotencyKey: idem}
	for i := range 4 {
		req.Descriptors = append(req.Descriptors, desc(fmt.Sprint("k", i), u))
	}
	return req
}

// seamAnswer is what a response says, descriptor by descriptor: over the
// limit, remaining, replayed and the reason.
func seamAnswer(r service.Response) string {
	out := fmt.Sprintf("over %v replayed %v reason %q:", r.OverLimit, r.Replayed, r.Reported.Reason)
	for i, d := range r.Decisions {
		out += fmt.Sprintf(" [%d over %v remaining %d replayed %v reason %q]", i, d.OverLimit, d.Result.Remaining, d.Result.Replayed, d.Reason)
	}
	return out
}

func decideOrFail(t *testing.T, svc *service.Service, req *service.Request) service.Response {
	t.Helper()
	r, err := svc.Decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A namespace whose store budget has calls for only some of a request's
// descriptors: those that take the calls are the first, in descriptor
// order, as on the serial path, never whichever goroutine comes first.
// The rest are decided past the budget by their failure modes (Closed
// denies). Each round's budget is full (a minute later) and its user new.
func TestGatheredDescriptorsTakeTheBudgetInOrder(t *testing.T) {
	for _, rate := range []int32{1, 2, 3} {
		t.Run(fmt.Sprint(rate, "/s"), func(t *testing.T) {
			gathered, serial, now := seamPair(t, seamSnapshot(t, rate))
			if !service.DecidesConcurrently(gathered, seamRequest("probe", "")) || service.DecidesConcurrently(serial, seamRequest("probe", "")) {
				t.Fatal("want the gathered service to decide the request's descriptors concurrently, the serial one serially")
			}
			pastBudget := 0
			for round := range 25 {
				now.Add(int64(time.Minute))
				u := fmt.Sprint("u", round)
				want := seamAnswer(decideOrFail(t, serial, seamRequest(u, "")))
				got := decideOrFail(t, gathered, seamRequest(u, ""))
				if seamAnswer(got) != want {
					t.Fatalf("round %d, gathered:\n  %s\nserial:\n  %s", round, seamAnswer(got), want)
				}
				for _, d := range got.Decisions {
					if d.Reason != "" {
						pastBudget++
					}
				}
			}
			if pastBudget == 0 {
				t.Fatal("no descriptor was decided past the budget: the test shows nothing")
			}
		})
	}
}

// A retried request (the same idempotency key) whose descriptors were
// decided concurrently replays the first answer, descriptor by
// descriptor, and counts nothing twice: as the serial path does.
func TestGatheredRetriesReplayAndCountOnce(t *testing.T) {
	// A budget that never runs out: every decision is the store's.
	gathered, serial, _ := seamPair(t, seamSnapshot(t, 1_000_000))
	for round := range 10 {
		u, key := fmt.Sprint("u", round), fmt.Sprint("charge-", round)
		var answers [2][]string
		for k, svc := range []*service.Service{gathered, serial} {
			for try := range 3 {
				r := decideOrFail(t, svc, seamRequest(u, key))
				if r.OverLimit || r.Replayed != (try > 0) {
					t.Fatalf("round %d, try %d: %s; want allowed, replayed from the second", round, try, seamAnswer(r))
				}
				for i, d := range r.Decisions {
					if d.Result.Remaining != 99 || d.Result.Replayed != (try > 0) {
						t.Fatalf("round %d, try %d, descriptor %d: %s; want 99 remaining (one unit counted)", round, try, i, seamAnswer(r))
					}
				}
				answers[k] = append(answers[k], seamAnswer(r))
			}
			// Without the key, a request counts afresh: the retries
			// counted nothing.
			if r := decideOrFail(t, svc, seamRequest(u, "")); r.Replayed || r.Decisions[0].Result.Remaining != 98 || r.Decisions[3].Result.Remaining != 98 {
				t.Fatalf("round %d, a request without the key after the retries: %s; want 98 remaining", round, seamAnswer(r))
			}
		}
		for try := range answers[0] {
			if answers[0][try] != answers[1][try] {
				t.Fatalf("round %d, try %d, gathered:\n  %s\nserial:\n  %s", round, try, answers[0][try], answers[1][try])
			}
		}
	}
}

// A retried request whose last descriptor was denied the first time (its
// counter spent): the others' decisions replay, the denial is decided
// afresh (a denial is not replayed), and nothing is counted twice; the
// gathered answers are the serial ones.
func TestGatheredRetriesOfAPartialDenial(t *testing.T) {
	gathered, serial, _ := seamPair(t, seamSnapshot(t, 1_000_000))
	for round := range 10 {
		u, key := fmt.Sprint("u", round), fmt.Sprint("charge-", round)
		var answers [2][]string
		for k, svc := range []*service.Service{gathered, serial} {
			spend := &service.Request{Domain: "seams", HitsAddend: 100, Descriptors: []service.Descriptor{desc("k3", u)}}
			if r := decideOrFail(t, svc, spend); r.OverLimit {
				t.Fatalf("round %d, spending k3's 100: %s", round, seamAnswer(r))
			}
			for try := range 3 {
				r := decideOrFail(t, svc, seamRequest(u, key))
				d := r.Decisions
				if !r.OverLimit || r.Replayed != (try > 0) || !d[3].OverLimit || d[3].Result.Replayed {
					t.Fatalf("round %d, try %d: %s; want denied by k3, the others replayed from the second", round, try, seamAnswer(r))
				}
				for i := range 3 {
					if d[i].OverLimit || d[i].Result.Remaining != 99 || d[i].Result.Replayed != (try > 0) {
						t.Fatalf("round %d, try %d, descriptor %d: %s; want allowed, 99 remaining (one unit counted)", round, try, i, seamAnswer(r))
					}
				}
				answers[k] = append(answers[k], seamAnswer(r))
			}
		}
		for try := range answers[0] {
			if answers[0][try] != answers[1][try] {
				t.Fatalf("round %d, try %d, gathered:\n  %s\nserial:\n  %s", round, try, answers[0][try], answers[1][try])
			}
		}
	}
}
