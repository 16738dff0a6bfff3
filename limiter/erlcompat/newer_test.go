package erlcompat_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// What ERL added after the version hack/build-erl.sh builds, so that the
// built ERL can't be the oracle: each case's answers are those ERL's
// change documents (its README and tests, at the commit named), written
// out by hand.

// A NewerCase is an ERL configuration (DOMAIN stands for its domain), the
// ERL change it follows, and its requests with the answers that change
// documents.
type NewerCase struct {
	Name, Change, Config string
	Steps                []NewerStep
}

// NewerStep is one request and its answer: the overall code, per
// descriptor its status as statusString writes it, and the metadata ERL
// returns under "metadata" in the dynamic metadata, as JSON ("" for none).
type NewerStep struct {
	Step
	Overall  string
	Statuses []string
	Metadata string
}

func ask(st Step, overall, metadata string, statuses ...string) NewerStep {
	return NewerStep{Step: st, Overall: overall, Statuses: statuses, Metadata: metadata}
}

// statusString is a descriptor status as the table writes it: its code,
// then with a current_limit the limit_remaining, and "no-reset" when it
// has no duration_until_reset.
func statusString(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	s := st.GetCode().String()
	if st.GetCurrentLimit() != nil {
		s += fmt.Sprintf(" %d", st.GetLimitRemaining())
		if st.GetDurationUntilReset() == nil {
			s += " no-reset"
		}
	}
	return s
}

var NewerCases = []NewerCase{
	{
		Name: "a '*' anywhere in a value: each matches any run of bytes, none too",
		// README "Example 9" and test/config/config_test.go's
		// TestWildcardConfig and share_threshold cases.
		Change: "#1085 (6bcd4d2)",
		Config: erl(`  - key: midWild
    value: bar*b
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`),
		Steps: []NewerStep{
			ask(one(d("midWild", "barab")), "OK", "", "OK 0"),
			ask(one(d("midWild", "bar123b")), "OK", "", "OK 0"), // each value its own counter
			ask(one(d("midWild", "barb")), "OK", "", "OK 0"),    // '*' matches nothing too
			ask(one(d("midWild", "bara"), d("midWild", "xbarb")), "OK", "", "OK", "OK"),
			ask(one(d("midWild", "barab")), "OVER_LIMIT", "", "OVER_LIMIT 0"),
			ask(one(d("multiWild", "foo123bar456baz"), d("multiWild", "foobarbaz")), "OK", "", "OK 0", "OK 0"),
			ask(one(d("multiWild", "foo123baz"), d("multiWild", "bar456baz")), "OK", "", "OK", "OK"),
			// share_threshold: every value the pattern matches shares one counter.
			ask(one(d("midpath", "/api/v1")), "OK", "", "OK 1"),
			ask(one(d("midpath", "/api-beta-v1")), "OK", "", "OK 0"),
			ask(one(d("midpath", "/apiXYZv1"), d("midpath", "/api/v2")), "OVER_LIMIT", "", "OVER_LIMIT 0", "OK"),
		},
	},
	{
		Name: "quota_mode: a quota over is OVER_LIMIT; the request is when every quota is, or a rate limit",
		// test/service/ratelimit_test.go's TestServiceQuotaMode*,
		// TestServiceMixedPerDescriptorModes*.
		Change: "#1059 (05c08d0)",
		Config: erl(`  - key: q1
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: r
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: qs
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 0}
`),
		Steps: []NewerStep{
			ask(one(d("q1", "x"), d("q2", "x")), "OK", "", "OK 0", "OK 2"),
			ask(one(d("q1", "x")), "OVER_LIMIT", "", "OVER_LIMIT 0"),                      // its only quota is over
			ask(one(d("q1", "x"), d("q2", "x")), "OK", "", "OVER_LIMIT 0", "OK 1"),        // one quota is under
			ask(one(d("q1", "x"), d("r", "x")), "OVER_LIMIT", "", "OVER_LIMIT 0", "OK 4"), // every quota is over
			ask(one(d("r", "x"), d("q2", "x")), "OK", "", "OK 3", "OK 0"),
			ask(one(d("q1", "x"), d("q2", "x")), "OVER_LIMIT", "", "OVER_LIMIT 0", "OVER_LIMIT 0"),
			// In shadow_mode too, a quota is answered OK: never over.
			ask(one(d("q1", "x"), d("qs", "x")), "OK", "", "OVER_LIMIT 0", "OK 0"),
		},
	},
	{
		Name: "metadata: the limits' that answered OK, merged in the descriptors' order",
		// test/service/ratelimit_test.go's TestRatelimitToMetadata and
		// service.mergeMetadata: a key already there is kept, maps under
		// one key merged; only a limit's own descriptor's metadata, never
		// an unlimited one's nor a descriptor's over its limit.
		Change: "#1112 (3728d99)",
		Config: erl(`  - key: plan
    value: gold
    metadata: {tier: gold, limits: {rps: 10}, tags: [a, b]}
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: region
    metadata: {tier: other, limits: {burst: 5}, zone: eu}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: free
    metadata: {never: told}
    rate_limit: {unlimited: true}
  - key: parent
    metadata: {not: told}
    descriptors:
      - key: child
        rate_limit: {unit: hour, requests_per_unit: 5}
`),
		Steps: []NewerStep{
			ask(one(d("plan", "gold"), d("region", "eu"), d("free", "x"), d("parent", "p", "child", "c")), "OK",
				`{"tier": "gold", "limits": {"rps": 10, "burst": 5}, "tags": ["a", "b"], "zone": "eu"}`,
				"OK 1", "OK 4", "OK", "OK 4"),
			// The configuration's metadata was not changed by the merge.
			ask(one(d("plan", "gold")), "OK", `{"tier": "gold", "limits": {"rps": 10}, "tags": ["a", "b"]}`, "OK 0"),
			ask(one(d("plan", "gold"), d("region", "eu")), "OVER_LIMIT", `{"tier": "other", "limits": {"burst": 5}, "zone": "eu"}`,
				"OVER_LIMIT 0", "OK 3"),
			ask(one(d("free", "x"), d("plan", "gold")), "OVER_LIMIT", "", "OK", "OVER_LIMIT 0"),
		},
	},
}

// TestNewerERL runs every newer case against the limiter, on its memory
// store and on Redis, and compares each answer with the one the ERL change
// documents.
func TestNewerERL(t *testing.T) {
	needERL(t)
	dir := filepath.Join(t.TempDir(), "config")
	var cases []Case
	for _, c := range NewerCases {
		cases = append(cases, Case{Name: c.Name, Config: c.Config})
	}
	writeCases(t, dir, cases)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			url := store
			if store == "redis" {
				url = "redis://" + redistest.Start(t).Addr
			}
			sluice := startSluice(t, dir, url)
			for i, c := range NewerCases {
				t.Run(c.Name, func(t *testing.T) { runNewer(t, sluice, i, c, store) })
			}
		})
	}
}

// runNewer runs c on a fresh attempt of its domain until one runs within
// one hour (the cases' shortest window) or fails otherwise. The memory
// run and the Redis run use different attempts.
func runNewer(t *testing.T, sluice rlsv3.RateLimitServiceClient, i int, c NewerCase, store string) {
	first := 0
	if store == "redis" {
		first = attempts / 2
	}
	for a := first; a < first+attempts/2; a++ {
		t0 := time.Now()
		diff := ""
		for j, st := range c.Steps {
			req := request(caseDomain(i, a), st.Hits, st.Descriptors...)
			got, err := call(sluice, req)
			if err != nil {
				t.Fatalf("step %d: %v", j, err)
			}
			if d := compareNewer(st, got); d != "" {
				diff = fmt.Sprintf("step %d (ERL %s): %s\nrequest %s\nSluice  %s", j, c.Change, d, prototext.Format(req), prototext.Format(got))
				break
			}
		}
		if diff == "" {
			return
		}
		if t0.Unix()/3600 == time.Now().Unix()/3600 {
			t.Fatal(diff)
		}
		t.Logf("attempt %d crossed an hour: starting over on the next copy; it said %s", a, diff)
	}
	t.Fatalf("every attempt crossed an hour")
}

// compareNewer says how got differs from st's answer.
func compareNewer(st NewerStep, got *rlsv3.RateLimitResponse) string {
	if got.GetOverallCode().String() != st.Overall {
		return fmt.Sprintf("overall_code %v, want %s", got.GetOverallCode(), st.Overall)
	}
	var statuses []string
	for _, s := range got.GetStatuses() {
		statuses = append(statuses, statusString(s))
	}
	if !reflect.DeepEqual(statuses, st.Statuses) {
		return fmt.Sprintf("statuses %q, want %q", statuses, st.Statuses)
	}
	md := got.GetDynamicMetadata().GetFields()["metadata"]
	if st.Metadata == "" {
		if md != nil {
			return fmt.Sprintf("dynamic metadata's metadata %v, want none", md)
		}
		return ""
	}
	var want any
	if err := json.Unmarshal([]byte(st.Metadata), &want); err != nil {
		return fmt.Sprintf("the table's metadata %s: %v", st.Metadata, err)
	}
	if md == nil || !reflect.DeepEqual(md.AsInterface(), want) {
		return fmt.Sprintf("dynamic metadata's metadata %v, want %s", md.AsInterface(), st.Metadata)
	}
	return ""
}
