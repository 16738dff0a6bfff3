package service

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/store"
)

const topPolicy = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: top, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}, {key: path, value: /v1/charges}]
  rate: {limit: 10, period: 1h}
`

func topFixture(t *testing.T) (*config.Policy, func(user string) (store.Key, []config.Entry)) {
	t.Helper()
	snap, err := config.Parse("inline", []byte(topPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Policies[0]
	var kb store.KeyBuilder
	return p, func(user string) (store.Key, []config.Entry) {
		e := []config.Entry{{Key: "user", Value: user}, {Key: "path", Value: "/v1/charges"}}
		return p.CounterKey(&kb, e), e
	}
}

func TestTopSketchFindsHeavyHitters(t *testing.T) {
	p, req := topFixture(t)
	sk := newTopSketch(TopOptions{K: 3, Values: TopTruncate, TruncateTo: 16})
	t0 := time.Date(2026, 11, 22, 10, 0, 5, 0, time.UTC)
	add := func(user string, n int, limited bool) {
		k, e := req(user)
		for range n {
			sk.add(t0, k, p, e, limited)
		}
	}
	// Three heavy hitters among 2,000 one-off values: far more distinct
	// values than the 16 slots, interleaved.
	for i := range 2000 {
		add(fmt.Sprintf("cold-%d", i), 1, false)
		if i%10 == 0 {
			add("alice", 3, false)
			add("bob", 2, true)
			add("carol", 1, false)
		}
	}
	if hot, _ := sk.report(t0); len(hot) != 0 {
		t.Fatalf("the current interval is not complete, yet reported %+v", hot)
	}
	hot, since := sk.report(t0.Add(time.Minute))
	if want := t0.Truncate(time.Minute); !since.Equal(want) {
		t.Errorf("interval start %v, want %v", since, want)
	}
	var names []string
	for _, h := range hot {
		names = append(names, h.Value)
		// Space-Saving: the count is an upper bound, at most Error over.
		if h.Requests < h.Error {
			t.Errorf("%+v: requests below the error bound", h)
		}
	}
	if got := strings.Join(names, " "); got != "user=alice user=bob user=carol" {
		t.Fatalf("hottest %q, want alice, bob, carol in that order: %+v", got, hot)
	}
	for _, h := range hot {
		want := map[string]int64{"user=alice": 600, "user=bob": 400, "user=carol": 200}[h.Value]
		if h.Requests-h.Error > want || h.Requests < want {
			t.Errorf("%s: requests %d (error %d), true count %d", h.Value, h.Requests, h.Error, want)
		}
	}
	if hot[1].Limited < 400 {
		t.Errorf("bob's denials %d, want at least 400", hot[1].Limited)
	}
}

func TestTopSketchIntervals(t *testing.T) {
	p, req := topFixture(t)
	sk := newTopSketch(TopOptions{K: 2, Interval: 10 * time.Second})
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	k, e := req("kim")
	sk.add(t0.Add(3*time.Second), k, p, e, false)
	sk.add(t0.Add(9*time.Second), k, p, e, false)
	hot, since := sk.report(t0.Add(12 * time.Second))
	if len(hot) != 1 || hot[0].Requests != 2 || !since.Equal(t0) {
		t.Fatalf("after the first interval: %+v since %v, want kim with 2 since %v", hot, since, t0)
	}
	// Reading again in the same interval gives the same answer.
	if again, _ := sk.report(t0.Add(19 * time.Second)); len(again) != 1 || again[0].Requests != 2 {
		t.Fatalf("a second read in the interval: %+v", again)
	}
	// An interval without traffic is reported empty, not as the older one.
	hot, since = sk.report(t0.Add(35 * time.Second))
	if len(hot) != 0 || !since.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("after a quiet interval: %+v since %v", hot, since)
	}
}

func TestTopSketchShowsNoRawValues(t *testing.T) {
	p, req := topFixture(t)
	secret := "sk_live_0123456789abcdef"
	k, e := req(secret)
	for _, tc := range []struct {
		opts TopOptions
		want string
	}{
		{TopOptions{K: 1, Key: []byte(testTopKey)}, "user=" + hmac16(testTopKey, secret)},
		{TopOptions{K: 1, Values: TopTruncate}, "user=sk_live_…"},
		{TopOptions{K: 1, Values: TopTruncate, TruncateTo: 3}, "user=sk_…"},
	} {
		sk := newTopSketch(tc.opts)
		t0 := time.Unix(0, 0)
		sk.add(t0, k, p, e, false)
		hot, _ := sk.report(t0.Add(time.Minute))
		if len(hot) != 1 || hot[0].Value != tc.want {
			t.Errorf("%+v: %+v, want %q", tc.opts, hot, tc.want)
		}
		if strings.Contains(hot[0].Value, secret) {
			t.Errorf("%+v shows the raw value", tc.opts)
		}
	}
	// Truncation never splits a UTF-8 character.
	sk := newTopSketch(TopOptions{K: 1, Values: TopTruncate, TruncateTo: 1})
	if got := sk.format(p, []config.Entry{{Key: "user", Value: "é1"}}); got != "user=…" {
		t.Errorf("truncating %q to 1 byte: %q", "é1", got)
	}
}

func TestTopOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts TopOptions
		want string
	}{
		{TopOptions{K: 21}, "top descriptors 21: want 0 (off) to 20"},
		{TopOptions{K: -1}, "top descriptors -1: want 0 (off) to 20"},
		{TopOptions{K: 5, Values: "plain"}, `top descriptor values "plain": want "hash" or "truncate"`},
		{TopOptions{K: 5, TruncateTo: 17}, "top descriptor truncation 17: want 1 to 16 bytes"},
		{TopOptions{K: 5}, "top descriptor hash key of 0 bytes: want at least 16"},
		{TopOptions{K: 5, Key: []byte("fifteen bytes..")}, "top descriptor hash key of 15 bytes: want at least 16"},
		{TopOptions{K: 5, Values: TopTruncate, Interval: time.Millisecond}, "top descriptor interval 1ms: want at least 1s"},
	} {
		err := tc.opts.Validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.opts, err, tc.want)
		}
	}
	for _, o := range []TopOptions{
		{K: 20, Values: TopTruncate, TruncateTo: 16, Interval: time.Second},
		{K: 20, Key: []byte(testTopKey)},
		{K: 0},
	} {
		if err := o.Validate(); err != nil {
			t.Errorf("valid options %+v: %v", o, err)
		}
	}
}

const testTopKey = "a fleet's key of 32 bytes, test."

func hmac16(key, v string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(v))
	return hex.EncodeToString(mac.Sum(nil))[:16]
}
