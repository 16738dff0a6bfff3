package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers"
)

// TestCollectorScale measures the collector at 500 policies served by 20
// limiter endpoints on the real API server: 3 real limiter processes taking
// traffic, and 17 stand-ins whose stats grow on every read for every policy
// (the worst case for writes) and whose snapshot answers are the first
// limiter's. The operator runs with the production collector settings
// (every 5s, each policy written at most every 10s, 5 writes/s in all). It
// prints the status writes per minute seen at the API server and the
// operator process's CPU with the collector running and with it idle, in
// one run; it asserts nothing. Set SLUICE_SCALE=1 (make bench-collector).
func TestCollectorScale(t *testing.T) {
	if os.Getenv("SLUICE_SCALE") == "" {
		t.Skip("set SLUICE_SCALE=1 (make bench-collector) to measure the collector at 500 policies x 20 pods")
	}
	needSuite(t)
	const policies, standIns = 500, 17
	phase := envDuration(t, "SLUICE_SCALE_PHASE", time.Minute)
	ctx := context.Background()
	fleet, pods := newFleet(t, "scale", "scale", 3)
	unbudgeted(t, fleet) // one namespace's policies fill the fleet
	var uids []string
	for i := range policies {
		p := benchPolicy("scale", fmt.Sprintf("p-%03d", i), "scale", i)
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		uids = append(uids, string(p.UID))
	}
	t.Cleanup(func() {
		deleteAllPolicies(t, "scale")
	})

	// Stand-ins: the first limiter's snapshot answers, stats of their own.
	proxy := adminProxy(pods[0])
	var addrs []string
	for i := range standIns {
		var reads atomic.Int64
		boot := fmt.Sprintf("stand-in-%d", i)
		addrs = append(addrs, standIn(t, pods[0], 11+i, func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/stats") {
				proxy.ServeHTTP(w, r)
				return
			}
			_, _ = w.Write(standInStats(boot, uids, reads.Add(1)))
		}))
	}
	addStandIns(t, fleet, addrs...)
	eventually(t, 3*time.Minute, "every policy enforced on 20 pods", func() error {
		var list v1alpha1.RateLimitPolicyList
		if err := k8s.List(ctx, &list, client.InNamespace("scale")); err != nil {
			return err
		}
		n := 0
		for _, p := range list.Items {
			if c := condition(p.Status.Conditions, v1beta1.EnforcedCondition); c != nil && c.Status == metav1.ConditionTrue &&
				len(p.Status.Fleets) == 1 && ptr32(p.Status.Fleets[0].PodsSynced) == 20 {
				n++
			}
		}
		if n < policies {
			return fmt.Errorf("%d of %d", n, policies)
		}
		return nil
	})

	// Traffic on the real limiters, over every policy, all along.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			body := fmt.Sprintf(`{"domain":"bench-%d","descriptors":[{"entries":[{"key":"tenant","value":"t%d"},{"key":"route","value":"/v1/items/%d"}]}]}`,
				(i%policies)%20, i%7, i%policies)
			if resp, err := http.Post("http://"+pods[i%3].httpAddr+"/v1/ratelimit/check", "application/json", strings.NewReader(body)); err == nil {
				resp.Body.Close()
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })

	measure := func(name string, mod func(*controllers.Options)) {
		stopOperator()
		var statusWrites, otherWrites atomic.Int64
		if err := startOperatorWith(func(o *controllers.Options, c *rest.Config) {
			o.CollectInterval, o.EnforcementMinWrite, o.CollectTimeout = 0, 0, 0 // the defaults
			if mod != nil {
				mod(o)
			}
			c.Wrap(countWrites(&statusWrites, &otherWrites))
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Second) // leader election, caches, first collections
		w0, o0, c0 := statusWrites.Load(), otherWrites.Load(), cpuTime()
		cyc0, sum0 := cycleSeconds(t)
		time.Sleep(phase)
		w, o, c := statusWrites.Load()-w0, otherWrites.Load()-o0, cpuTime()-c0
		cyc, sum := cycleSeconds(t)
		minutes := phase.Minutes()
		mean := time.Duration(0)
		if cyc > cyc0 {
			mean = time.Duration((sum - sum0) / (cyc - cyc0) * float64(time.Second))
		}
		fmt.Printf("collector scale, %s: %d policies x 20 endpoints (3 real limiters), %v: %.0f status writes/min, %.0f other writes/min; "+
			"test process CPU %.1f%% of a core (operator, stand-ins, traffic); %.0f collections, mean %v\n",
			name, policies, phase, float64(w)/minutes, float64(o)/minutes, 100*c.Seconds()/phase.Seconds(), cyc-cyc0, mean.Round(time.Millisecond))
	}
	t.Cleanup(func() { stopOperator(); _ = startOperator() })
	measure("collector at its defaults", nil)
	measure("collector idle (1h interval)", func(o *controllers.Options) { o.CollectInterval = time.Hour })
}

// standInStats is a stand-in's stats answer on its nth read: every policy
// took 10 more requests, 1 of them limited, since the last read.
func standInStats(boot string, uids []string, n int64) []byte {
	var b bytes.Buffer
	b.WriteString(`{"bootID":"` + boot + `","startedAt":"2020-01-01T00:00:00Z","policies":[`)
	for i, uid := range uids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"uid":"` + uid + `","allowed":` + strconv.FormatInt(9*n, 10) + `,"limited":` + strconv.FormatInt(n, 10) +
			`,"shadowLimited":0,"failedOpen":0,"failedClosed":0,"localFallback":0,"nearLimit":0}`)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// countWrites counts the operator's mutating API calls: those of a status
// subresource, and the others.
func countWrites(status, other *atomic.Int64) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
			default:
				if strings.HasSuffix(r.URL.Path, "/status") {
					status.Add(1)
				} else {
					other.Add(1)
				}
			}
			return rt.RoundTrip(r)
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cycleSeconds reads sluice_operator_collector_cycle_seconds: the count
// and sum of collections.
func cycleSeconds(t *testing.T) (float64, float64) {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_operator_collector_cycle_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return float64(h.GetSampleCount()), h.GetSampleSum()
		}
	}
	return 0, 0
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func ptr32(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}
