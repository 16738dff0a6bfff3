package controllers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// TestCollectorScale prints the collector's status writes per minute and
// CPU for 500 policies served by 20 stand-in limiter admin endpoints, every
// policy taking traffic on every pod all the time (the worst case for
// writes). It measures, it asserts nothing; set SLUICE_SCALE=1 to run it.
// The API server is controller-runtime's fake client; the CPU includes the
// stand-ins' answers, which are cheap (pre-rendered per collection).
func TestCollectorScale(t *testing.T) {
	if os.Getenv("SLUICE_SCALE") == "" {
		t.Skip("set SLUICE_SCALE=1 to measure the collector at 500 policies x 20 pods")
	}
	const policies, pods, cycles = 500, 20, 60 // 60 collections of 5s: 5 simulated minutes
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme)
	var uids []string
	for i := range policies {
		p := &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: fmt.Sprintf("p-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		p.Status.Fleets = []v1alpha1.FleetStatus{{Namespace: "scale", Name: "fleet"}}
		b = b.WithObjects(p).WithStatusSubresource(p)
		uids = append(uids, string(p.UID))
	}
	cl := b.Build()

	var cycle atomic.Int64
	body := func() []byte {
		n := cycle.Load()
		var sb strings.Builder
		sb.WriteString(`{"bootID":"b","startedAt":"2020-01-01T00:00:00Z","policies":[`)
		for i, uid := range uids {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"uid":"` + uid + `","allowed":` + strconv.FormatInt(100*n, 10) + `,"limited":` + strconv.FormatInt(3*n, 10) + `,"shadowLimited":0,"failedOpen":0}`)
		}
		sb.WriteString("]}")
		return []byte(sb.String())
	}
	var rendered atomic.Pointer[[]byte]
	render := func() { b := body(); rendered.Store(&b) }
	render()
	acks := NewAckTracker()
	track := &fleetTrack{pods: map[string]*podTrack{}}
	for range pods {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(*rendered.Load()) }))
		t.Cleanup(srv.Close)
		track.pods[strings.TrimPrefix(srv.URL, "http://")] = &podTrack{}
	}
	acks.fleets[types.NamespacedName{Namespace: "scale", Name: "fleet"}] = track

	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &Collector{Client: cl, Acks: acks, now: func() time.Time { return now }}
	c.defaults()
	writesBefore := counterValue(enforcementWrites)
	var cpu time.Duration
	ctx := context.Background()
	for range cycles {
		cycle.Add(1)
		render()
		now = now.Add(c.Interval)
		before := cpuTime()
		if err := c.collect(ctx); err != nil {
			t.Fatal(err)
		}
		cpu += cpuTime() - before
	}
	writes := counterValue(enforcementWrites) - writesBefore
	minutes := float64(cycles) * c.Interval.Minutes()
	var list v1alpha1.RateLimitPolicyList
	if err := cl.List(ctx, &list, client.InNamespace("scale")); err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, p := range list.Items {
		if p.Status.Enforcement != nil {
			written++
		}
	}
	t.Logf("%d policies x %d pods, every %v for %.0f simulated minutes: %.0f status writes (%.0f/min, budget %v/s); %d/%d policies written at least once; collector CPU %v per collection (%.1f%% of one core at a %v interval)",
		policies, pods, c.Interval, minutes, writes, writes/minutes, c.MaxWritesPerSecond, written, policies,
		cpu/cycles, 100*(cpu/cycles).Seconds()/c.Interval.Seconds(), c.Interval)
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	m := &dto.Metric{}
	_ = c.Write(m)
	return m.GetCounter().GetValue()
}
