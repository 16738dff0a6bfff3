package controllers_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/resources"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// statsPolicy is a FixedWindow policy of limit per hour on domain, keyed
// by user, served by the fleet labelled fleet.
func statsPolicy(ns, name, fleet, domain string, limit int64, shadow bool) *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"fleet": fleet}},
		Spec: v1alpha1.RateLimitPolicySpec{
			Domain:      domain,
			Descriptors: []v1alpha1.Descriptor{{Key: "user"}},
			Algorithm:   ptr.To(v1alpha1.FixedWindow),
			Rate:        v1alpha1.Rate{Limit: limit, Period: metav1.Duration{Duration: time.Hour}},
			Shadow:      ptr.To(shadow),
		},
	}
}

// waitEnforcement waits until a policy's status.enforcement passes ok.
func waitEnforcement(t testing.TB, ns, name string, ok func(*v1alpha1.EnforcementStatus) error) *v1alpha1.EnforcementStatus {
	t.Helper()
	var got *v1alpha1.EnforcementStatus
	eventually(t, 30*time.Second, fmt.Sprintf("status.enforcement of %s/%s", ns, name), func() error {
		p := &v1alpha1.RateLimitPolicy{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return err
		}
		if p.Status.Enforcement == nil {
			return fmt.Errorf("no status.enforcement yet")
		}
		if err := ok(p.Status.Enforcement); err != nil {
			return fmt.Errorf("%w: %s", err, enforcementString(p.Status.Enforcement))
		}
		got = p.Status.Enforcement
		return nil
	})
	return got
}

func enforcementString(e *v1alpha1.EnforcementStatus) string {
	v := func(p *int64) int64 { return ptr.Deref(p, -1) }
	return fmt.Sprintf("allowed %d, limited %d, shadowLimited %d, failedOpen %d, unreadPods %q",
		v(e.Allowed), v(e.Limited), v(e.ShadowLimited), v(e.FailedOpen), e.UnreadPods)
}

// counted is an ok func of waitEnforcement wanting exact counts.
func counted(allowed, limited, shadowLimited int64) func(*v1alpha1.EnforcementStatus) error {
	return func(e *v1alpha1.EnforcementStatus) error {
		if ptr.Deref(e.Allowed, -1) != allowed || ptr.Deref(e.Limited, -1) != limited || ptr.Deref(e.ShadowLimited, -1) != shadowLimited {
			return fmt.Errorf("want allowed %d, limited %d, shadowLimited %d", allowed, limited, shadowLimited)
		}
		return nil
	}
}

// awayFromTheHour waits out the last seconds of a clock hour, so that a
// FixedWindow of 1h does not roll over during the test.
func awayFromTheHour(t testing.TB, need time.Duration) {
	now := time.Now()
	if left := now.Truncate(time.Hour).Add(time.Hour).Sub(now); left < need {
		t.Logf("Waiting %v for the next hour's window", left)
		time.Sleep(left + time.Second)
	}
}

// Known traffic over 3 real limiters sharing one Redis shows in
// status.enforcement, summed over the pods; a shadow policy's would-be
// denials show as shadowLimited and never limit; a limiter restarted
// during the window neither lowers nor doubles the totals.
func TestEnforcementStats(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns, pods := externalRedisFleet(t, "stats", "stats", 3, nil)
	for _, p := range []*v1alpha1.RateLimitPolicy{
		statsPolicy(ns, "hundred", "stats", "stats-api", 100, false),
		statsPolicy(ns, "shadow", "stats", "stats-shadow", 10, true),
	} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	}
	waitPolicy(t, ns, "hundred", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	waitPolicy(t, ns, "shadow", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	awayFromTheHour(t, 2*time.Minute)

	t.Run("150 requests against 100 show allowed 100 and limited 50", func(t *testing.T) {
		codes := map[int]int{}
		for i := range 150 {
			codes[pods[i%3].check(t, "stats-api", "user", "kim")]++
		}
		if codes[http.StatusOK] != 100 || codes[http.StatusTooManyRequests] != 50 {
			t.Fatalf("answers %v, want 100 OK and 50 Too Many Requests", codes)
		}
		e := waitEnforcement(t, ns, "hundred", counted(100, 50, 0))
		if e.Window == nil || e.Window.Duration != observe.DefaultEnforcementWindow || e.UpdatedAt == nil || len(e.UnreadPods) != 0 {
			t.Errorf("status.enforcement %+v: want window 5m, updatedAt, no unread pods", e)
		}
	})

	t.Run("a shadow policy shows shadowLimited and never limits", func(t *testing.T) {
		for i := range 30 {
			if code := pods[i%3].check(t, "stats-shadow", "user", "lee"); code != http.StatusOK {
				t.Fatalf("request %d under a shadow policy answered %d", i+1, code)
			}
		}
		waitEnforcement(t, ns, "shadow", counted(10, 0, 20))
		out := kubectl(t, "get", "rlp", "-n", ns)
		if !strings.Contains(out, "SHADOW") || !regexpMatch(`(?m)^shadow\s.*\s10\s+0\s+20\s`, out) || !regexpMatch(`(?m)^hundred\s.*\s100\s+50\s+0\s`, out) {
			t.Errorf("kubectl get rlp lacks the Allowed, Limited and Shadow counts:\n%s", out)
		}
	})

	t.Run("a limiter restarted during the window neither lowers nor doubles the totals", func(t *testing.T) {
		pods[0].stop()
		pods[0].start(t)
		eventually(t, 20*time.Second, "the restarted limiter enforces", func() error {
			if v := pods[0].loaded(t); v == "" {
				return fmt.Errorf("no snapshot loaded yet")
			}
			return nil
		})
		for i := range 10 {
			if code := pods[i%3].check(t, "stats-api", "user", "kim"); code != http.StatusTooManyRequests {
				t.Fatalf("request %d after the restart answered %d, want 429", i+1, code)
			}
		}
		waitEnforcement(t, ns, "hundred", counted(100, 60, 0))
		time.Sleep(time.Second) // several collections and write intervals
		waitEnforcement(t, ns, "hundred", counted(100, 60, 0))
	})
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// A limiter whose stats endpoint answers garbage, and one that never
// answers, are skipped and counted as errors; status.enforcement names
// them; the readable limiter's counts still arrive.
func TestCollectorSkipsUnreadablePods(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "stats-unread", "unread", 1)
	ns := fleet.Namespace
	p := statsPolicy(ns, "five", "unread", "unread-api", 5, false)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })

	// Two stand-in pods: both answer the snapshot endpoint as the real
	// limiter does (so the policy is enforced on every ready pod); one
	// answers its stats with garbage, the other never answers them.
	proxy := adminProxy(pods[0])
	hang := make(chan struct{})
	garbage := standIn(t, pods[0], 9, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stats") {
			_, _ = w.Write([]byte("<html>not what you wanted"))
			return
		}
		proxy.ServeHTTP(w, r)
	})
	hanging := standIn(t, pods[0], 10, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stats") {
			// Until the test ends, whatever the connection does: a
			// handler that returned when its context ended would answer
			// 200 with no body to a caller still waiting (seen once as
			// "decoding ...: EOF" in place of the caller's deadline).
			<-hang
			return
		}
		proxy.ServeHTTP(w, r)
	})
	t.Cleanup(func() { close(hang) })
	addStandIns(t, fleet, garbage, hanging)

	waitPolicy(t, ns, "five", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	errorsBefore := collectorErrorCount(t, ns+"/"+fleet.Name)
	for range 7 {
		pods[0].check(t, "unread-api", "user", "max")
	}
	e := waitEnforcement(t, ns, "five", func(e *v1alpha1.EnforcementStatus) error {
		if err := counted(5, 2, 0)(e); err != nil {
			return err
		}
		if len(e.UnreadPods) != 2 {
			return fmt.Errorf("want 2 unread pods")
		}
		return nil
	})
	// Sorted as strings, so the addresses may come in either order.
	why := map[string]string{}
	for _, u := range e.UnreadPods {
		addr, msg, _ := strings.Cut(u, ": ")
		why[addr] = msg
	}
	if !strings.Contains(why[garbage], "decoding") || !strings.Contains(why[hanging], "deadline exceeded") {
		t.Errorf("unreadPods %q: want %s (garbage) and %s (timeout), with why", e.UnreadPods, garbage, hanging)
	}
	if n := collectorErrorCount(t, ns+"/"+fleet.Name); n < errorsBefore+2 {
		t.Errorf("sluice_operator_collector_errors_total for the fleet is %v, was %v: want both pods counted", n, errorsBefore)
	}
}

// standIn serves h on the loopback address .host of the limiter's block and
// the limiter's admin port, over HTTPS with the limiter's admin
// certificate (a pod of the fleet), and returns its pod address
// (host:port).
func standIn(t *testing.T, like *limiterProc, host int, h http.HandlerFunc) string {
	t.Helper()
	ip, port, _ := net.SplitHostPort(like.adminAddr)
	lo := ip[:strings.LastIndex(ip, ".")+1] + strconv.Itoa(host)
	cert, err := tls.LoadX509KeyPair(like.tlsCert, like.tlsKey)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(lo, port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
	t.Cleanup(func() { _ = srv.Close() })
	return net.JoinHostPort(podNetwork.podIP(lo), port)
}

// adminProxy forwards to the limiter's admin plane, over HTTPS.
func adminProxy(to *limiterProc) *httputil.ReverseProxy {
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "https", Host: to.adminAddr})
	proxy.Transport = testAdminClient.Transport
	return proxy
}

// addStandIns adds ready endpoints at the given pod addresses to the
// fleet's EndpointSlice.
func addStandIns(t *testing.T, fleet *v1alpha1.LimiterFleet, addrs ...string) {
	t.Helper()
	ctx := context.Background()
	slice := &discoveryv1.EndpointSlice{}
	key := client.ObjectKey{Namespace: fleet.Namespace, Name: resources.LimiterName(betaOf(fleet)) + "-abcde"}
	if err := k8s.Get(ctx, key, slice); err != nil {
		t.Fatal(err)
	}
	owners := fleetReplicaSet(t, fleet) // stand-ins for the fleet's own pods
	for i, a := range addrs {
		ip, _, _ := net.SplitHostPort(a)
		pod := limiterPod(t, fleet, fmt.Sprintf("stand-in-%d", i), ip, owners)
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: fleet.Namespace, Name: pod.Name, UID: pod.UID},
		})
	}
	if err := k8s.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
}

// collectorErrorCount reads the operator's collector error counter of a
// fleet (the operator runs in this process).
func collectorErrorCount(t *testing.T, fleet string) float64 {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_operator_collector_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "fleet" && l.GetValue() == fleet {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// With spec.stats.topDescriptors, the fleet's limiters (run with the
// arguments its Deployment renders) report each policy's hottest values,
// and the collector sums them over the pods into status.enforcement.hottest.
func TestEnforcementHottest(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	const interval = 5 * time.Second
	ns, pods := externalRedisFleet(t, "hottest", "hot", 3, func(s *v1alpha1.LimiterFleetSpec) {
		s.Stats = &v1alpha1.FleetStats{TopDescriptors: ptr.To[int32](2),
			DescriptorValues: ptr.To(v1alpha1.DescriptorValuesTruncate), TruncateTo: ptr.To[int32](5)}
	}, "--top-descriptor-interval="+interval.String())
	pol := statsPolicy(ns, "five", "hot", "hot-api", 5, false)
	if err := k8s.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, pol) })
	waitPolicy(t, ns, "five", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	awayFromTheHour(t, time.Minute)

	// All the traffic in one interval: start just after a boundary.
	time.Sleep(time.Until(time.Now().Truncate(interval).Add(interval + 100*time.Millisecond)))
	for i, user := range []string{"alice-the-first", "alice-the-first", "bob", "alice-the-first", "carol", "alice-the-first",
		"bob", "alice-the-first", "alice-the-first", "bob", "alice-the-first", "alice-the-first"} {
		pods[i%3].check(t, "hot-api", "user", user)
	}
	want := []v1alpha1.HotDescriptor{{Value: "user=alice…", Requests: 8, Limited: 3}, {Value: "user=bob", Requests: 3}}
	e := waitEnforcement(t, ns, "five", func(e *v1alpha1.EnforcementStatus) error {
		if fmt.Sprint(e.Hottest) != fmt.Sprint(want) {
			return fmt.Errorf("hottest %+v, want %+v", e.Hottest, want)
		}
		return nil
	})
	if e.HottestSince == nil || e.HottestSince.Time.Sub(time.Now().Truncate(interval)) > 0 {
		t.Errorf("hottestSince %v: want the start of a past interval", e.HottestSince)
	}
	if out := kubectl(t, "get", "rlp", "-n", ns, "five", "-o", "jsonpath={.status.enforcement.hottest[0].value}"); out != "user=alice…" {
		t.Errorf("kubectl shows hottest[0].value %q", out)
	}
	// A quiet interval later, the list goes.
	waitEnforcement(t, ns, "five", func(e *v1alpha1.EnforcementStatus) error {
		if e.Hottest != nil || e.HottestSince != nil {
			return fmt.Errorf("hottest %+v since %v after a quiet interval", e.Hottest, e.HottestSince)
		}
		return nil
	})
}

// A policy in two-tier mode shows the overshoot bound its limiters report.
func TestEnforcementOvershootBound(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns, pods := externalRedisFleet(t, "overshoot", "tier", 2, nil)
	bucket := statsPolicy(ns, "bucket", "tier", "tier-bucket", 1000, false)
	bucket.Spec.Algorithm = ptr.To(v1alpha1.TokenBucket)
	bucket.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true), MaxOvershoot: ptr.To(intstr.FromString("5%"))}
	window := statsPolicy(ns, "window", "tier", "tier-window", 1000, false)
	window.Spec.LocalTier = &v1alpha1.LocalTier{Enabled: ptr.To(true)}
	exact := statsPolicy(ns, "exact", "tier", "tier-exact", 1000, false)
	for _, p := range []*v1alpha1.RateLimitPolicy{bucket, window, exact} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
		waitPolicy(t, ns, p.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	}
	for i := range 20 {
		for _, d := range []string{"tier-bucket", "tier-window", "tier-exact"} {
			if code := pods[i%2].check(t, d, "user", "kim"); code != http.StatusOK {
				t.Fatalf("%s request %d answered %d", d, i+1, code)
			}
		}
	}
	bound := func(want int64) func(*v1alpha1.EnforcementStatus) error {
		return func(e *v1alpha1.EnforcementStatus) error {
			if ptr.Deref(e.Allowed, 0) != 20 || ptr.Deref(e.OvershootBound, -1) != want {
				return fmt.Errorf("want allowed 20 and overshootBound %d, got %v", want, ptr.Deref(e.OvershootBound, -1))
			}
			return nil
		}
	}
	waitEnforcement(t, ns, "bucket", bound(50)) // 5% of 1000
	waitEnforcement(t, ns, "window", bound(0))  // a grant ends with its window
	waitEnforcement(t, ns, "exact", func(e *v1alpha1.EnforcementStatus) error {
		if ptr.Deref(e.Allowed, 0) != 20 || e.OvershootBound != nil {
			return fmt.Errorf("want allowed 20 and no overshootBound")
		}
		return nil
	})
}

// externalRedisFleet creates a fleet in a new namespace ns that selects the
// policies labelled fleet=<name> and counts in a real Redis, with n limiter
// processes. The limiters get a generous Redis deadline: on a loaded
// machine a cold first call could time out and fail open, which is not
// what these tests count. spec, when not nil, changes the fleet first.
func externalRedisFleet(t *testing.T, ns, name string, n int, spec func(*v1alpha1.LimiterFleetSpec), args ...string) (string, []*limiterProc) {
	t.Helper()
	srv := redistest.Start(t)
	ns = namespace(t, ns)
	fleet := &v1alpha1.LimiterFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.LimiterFleetSpec{
			Replicas:       ptr.To(int32(n)),
			PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": name}},
			Redis:          v1alpha1.RedisSpec{Mode: ptr.To(v1alpha1.RedisExternal), Addresses: []string{srv.Addr}},
		},
	}
	if spec != nil {
		spec(&fleet.Spec)
	}
	if err := k8s.Create(context.Background(), fleet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteFleet(t, fleet) })
	return ns, fleetPodsWithArgs(t, fleet, n, "redis://"+srv.Addr, append(args, "--redis-timeout=2s")...)
}

// A Concurrency policy goes into the snapshot like any policy, and its
// status counts the slots taken (allowed), those released, and those in
// flight, summed over the fleet's pods: the release goes to another pod
// than the check, as Envoy's stream-done call may.
func TestEnforcementInFlight(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns, pods := externalRedisFleet(t, "inflight", "conc", 2, nil)
	p := statsPolicy(ns, "slots", "conc", "conc-api", 0, false)
	p.Spec.Algorithm, p.Spec.Rate = ptr.To(v1alpha1.Concurrency), v1alpha1.Rate{}
	p.Spec.Concurrency = &v1alpha1.ConcurrencyLimit{MaxInFlight: 3}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	waitPolicy(t, ns, p.Name, v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)

	const descriptors = `"domain":"conc-api","descriptors":[{"entries":[{"key":"user","value":"kim"}]}]`
	var leases []string
	for i := range 4 {
		resp, err := http.Post("http://"+pods[0].httpAddr+"/v1/ratelimit/check", "application/json", strings.NewReader("{"+descriptors+"}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i < 3]; resp.StatusCode != want {
			t.Fatalf("check %d answered %d, want %d", i+1, resp.StatusCode, want)
		}
		leases = append(leases, resp.Header.Get("Sluice-Lease"))
	}
	resp, err := http.Post("http://"+pods[1].httpAddr+"/v1/ratelimit/release", "application/json",
		strings.NewReader("{"+descriptors+`,"lease":"`+leases[0]+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("release on the other pod answered %d", resp.StatusCode)
	}
	waitEnforcement(t, ns, "slots", func(e *v1alpha1.EnforcementStatus) error {
		if ptr.Deref(e.Allowed, -1) != 3 || ptr.Deref(e.Limited, -1) != 1 || ptr.Deref(e.Released, -1) != 1 || ptr.Deref(e.InFlight, -1) != 2 {
			return fmt.Errorf("allowed %d limited %d released %d inFlight %d, want 3, 1, 1 and 2",
				ptr.Deref(e.Allowed, -1), ptr.Deref(e.Limited, -1), ptr.Deref(e.Released, -1), ptr.Deref(e.InFlight, -1))
		}
		return nil
	})
}

// A request the limiter won't count because of what the client sent (here
// a value over 1 KiB) is denied, and shows in status.enforcement as
// refused, in no other count.
func TestRefusedInEnforcementStatus(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "stats-refused", "refused", 1)
	ns := fleet.Namespace
	p := statsPolicy(ns, "five", "refused", "refused-api", 5, false)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	waitPolicy(t, ns, "five", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	awayFromTheHour(t, 2*time.Minute)
	long := strings.Repeat("u", 1100)
	for i := range 3 {
		if code := pods[0].check(t, "refused-api", "user", long); code != http.StatusTooManyRequests {
			t.Fatalf("request %d with a 1100-byte value answered %d, want 429 (refused)", i+1, code)
		}
	}
	if code := pods[0].check(t, "refused-api", "user", "kim"); code != http.StatusOK {
		t.Fatalf("kim answered %d, want 200", code)
	}
	waitEnforcement(t, ns, "five", func(e *v1alpha1.EnforcementStatus) error {
		if ptr.Deref(e.Refused, -1) != 3 || ptr.Deref(e.Allowed, -1) != 1 || ptr.Deref(e.Limited, -1) != 0 {
			return fmt.Errorf("want refused 3, allowed 1, limited 0; refused is %d", ptr.Deref(e.Refused, -1))
		}
		return nil
	})
}

// A ready pod that never answers holds Enforced back, and a new policy
// says so at once: Enforced=False SnapshotPending naming how many pods have
// it, rather than no Enforced condition at all (which left a user, and a
// test waiting for Enforced, with nothing to go on).
func TestNewPolicyShowsAPodThatNeverAnswers(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	fleet, pods := newFleet(t, "never-answers", "never", 1)
	hang := make(chan struct{})
	silent := standIn(t, pods[0], 11, func(w http.ResponseWriter, r *http.Request) { <-hang })
	t.Cleanup(func() { close(hang) })
	addStandIns(t, fleet, silent)

	p := statsPolicy(fleet.Namespace, "pending", "never", "never-api", 5, false)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	waitPolicy(t, p.Namespace, p.Name, v1beta1.EnforcedCondition, metav1.ConditionFalse, v1beta1.SnapshotPendingReason)
	eventually(t, 30*time.Second, "Enforced naming the one pod of two that has the policy", func() error {
		c, _, err := policyConditionErr(p.Namespace, p.Name, v1beta1.EnforcedCondition)
		switch {
		case err != nil:
			return err
		case c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "1/2 pods"):
			return fmt.Errorf("Enforced %+v", c)
		}
		return nil
	})
}
