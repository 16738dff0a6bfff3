package service_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytest"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/limiter/service"
	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

// scriptCalls is how many scripts Redis ran since its stats were reset.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				c, _ := strconv.ParseInt(calls, 10, 64)
				n += c
			}
		}
	}
	return n
}

// A cost above a policy's capacity can never be allowed: the default
// maxCost refuses it with InvalidArgument, naming the policy and its
// capacity, before any script runs in Redis. On main it ran the script (a SlidingLog's work
// grows with the cost) and answered a denial that never ends.
func TestCostAboveCapacityRefusedBeforeRedis(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pol := func(name string, a v1alpha1.Algorithm, key string, limit int64, burst *int64, shadow bool) v1alpha1.RateLimitPolicy {
		return v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: v1alpha1.RateLimitPolicySpec{Domain: "cap", Algorithm: ptr.To(a), Descriptors: []v1alpha1.Descriptor{{Key: key}},
				Rate: v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: time.Minute}}, Burst: burst, Shadow: ptr.To(shadow)}}
	}
	snap, err := policytest.Compile([]v1alpha1.RateLimitPolicy{
		pol("log", v1alpha1.SlidingLog, "user", 100, nil, false),
		pol("bucket", v1alpha1.TokenBucket, "tenant", 10, ptr.To[int64](50), false),
		pol("watch", v1alpha1.FixedWindow, "ip", 5, nil, true),
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(st, service.Options{Fallback: memoryStore(t)})
	svc.Swap(snap)
	ctx := context.Background()
	decide := func(cost uint64, kv ...string) (service.Response, error) {
		return svc.Decide(ctx, &service.Request{Domain: "cap", Descriptors: []service.Descriptor{desc(kv...)}, HitsAddend: cost})
	}

	if err := srv.Client(t).ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cost  uint64
		entry string
		want  string
	}{
		{101, "user", "costs 101, above the maximum cost of 100 of policy shop/log (spec.limit.rate.cost.max, by default the capacity, its limit)"},
		{51, "tenant", "costs 51, above the maximum cost of 50 of policy shop/bucket (spec.limit.rate.cost.max, by default the capacity, its burst)"},
	} {
		if got := answer(decide(tc.cost, tc.entry, "x")); !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, tc.want) {
			t.Fatalf("cost %d: %s, want refused %q", tc.cost, got, tc.want)
		}
	}
	if n := scriptCalls(t, srv); n != 0 {
		t.Fatalf("Redis ran %d scripts for requests refused", n)
	}

	// Up to the capacity, decided as ever; a shadow policy refuses
	// nothing.
	if r, err := decide(50, "user", "u1", "tenant", "t1"); err != nil || r.OverLimit {
		t.Fatalf("cost 50: %+v %v, want allowed", r, err)
	}
	if r, err := decide(6, "ip", "10.0.0.1"); err != nil || r.OverLimit {
		t.Fatalf("cost 6 on the shadow policy of limit 5: %+v %v, want allowed (shadow)", r, err)
	}
	if n := scriptCalls(t, srv); n == 0 {
		t.Fatal("no script ran for the requests decided")
	}
}
