package controllers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// softCheck sends one HTTP check of user to a limiter and returns the
// status code and the soft-limit mark.
func softCheck(t *testing.T, p *limiterProc, domain, user string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":"user","value":%q}]}]}`, domain, user)
	resp, err := http.Post("http://"+p.httpAddr+"/v1/ratelimit/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Sluice-Soft-Limit")
}

// A soft policy beside the hard limit of the same requests: the operator
// accepts and enforces both (a soft limit does not conflict with its hard
// one). Over 3 real limiters sharing one Redis, the requests over the soft
// threshold are allowed and marked until the hard limit denies, and
// status.enforcement.softLimited counts them, summed over the pods, as
// kubectl get -o wide shows.
func TestEnforcementSoftLimited(t *testing.T) {
	needSuite(t)
	ctx := context.Background()
	ns, pods := externalRedisFleet(t, "soft", "soft", 3, nil)
	warn := statsPolicy(ns, "warn", "soft", "soft-api", 10, false)
	warn.Spec.Soft = ptr.To(true)
	for _, p := range []*v1alpha1.RateLimitPolicy{warn, statsPolicy(ns, "hard", "soft", "soft-api", 20, false)} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	}
	waitPolicy(t, ns, "warn", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	waitPolicy(t, ns, "hard", v1beta1.EnforcedCondition, metav1.ConditionTrue, v1beta1.EnforcedReason)
	awayFromTheHour(t, 2*time.Minute)

	codes, marked := map[int]int{}, 0
	for i := range 25 {
		code, mark := softCheck(t, pods[i%3], "soft-api", "kim")
		codes[code]++
		if mark != "" {
			if mark != `"`+ns+`/warn"` {
				t.Fatalf("request %d marked %q, want %q", i+1, mark, ns+"/warn")
			}
			marked++
		}
		if over := i >= 10; (mark != "") != over {
			t.Fatalf("request %d: mark %q, want one only over the soft limit of 10", i+1, mark)
		}
	}
	if codes[http.StatusOK] != 20 || codes[http.StatusTooManyRequests] != 5 || marked != 15 {
		t.Fatalf("answers %v, %d marked; want 20 OK, 5 Too Many Requests, 15 marked", codes, marked)
	}
	waitEnforcement(t, ns, "warn", func(e *v1alpha1.EnforcementStatus) error {
		if ptr.Deref(e.Allowed, -1) != 10 || ptr.Deref(e.SoftLimited, -1) != 15 || ptr.Deref(e.Limited, -1) != 0 {
			return fmt.Errorf("want allowed 10, softLimited 15, limited 0; softLimited is %d", ptr.Deref(e.SoftLimited, -1))
		}
		return nil
	})
	if e := waitEnforcement(t, ns, "hard", counted(20, 5, 0)); e.SoftLimited != nil {
		t.Errorf("the hard policy shows softLimited %d: only soft policies do", *e.SoftLimited)
	}
	out := kubectl(t, "get", "rlp", "-n", ns, "-o", "wide")
	if !strings.Contains(out, "SOFTLIMITED") || !regexpMatch(`(?m)^warn\s.*\s10\s+0\s+0\s+15\s`, out) {
		t.Errorf("kubectl get rlp -o wide lacks the SoftLimited count:\n%s", out)
	}
}
