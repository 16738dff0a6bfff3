package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
)

func TestLoadGood(t *testing.T) {
	snap, err := config.LoadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range snap.Policies {
		ids = append(ids, p.ID())
	}
	if got := strings.Join(ids, " "); got != "default/per-ip shop/per-user shop/per-user-path" {
		t.Fatalf("policies %q: want sorted, with namespace defaulted", got)
	}
	ip := snap.Policies[0]
	if ip.Limit.Burst != 6 || ip.Limit.Algorithm.String() != "GCRA" || ip.FailureMode != "Open" || ip.Shadow {
		t.Fatalf("per-ip compiled wrong: %+v", ip)
	}
	if u := snap.Policies[1]; u.Limit.Algorithm.String() != "TokenBucket" || u.Limit.Burst != 10 {
		t.Fatalf("defaults not applied: %+v", u.Limit)
	}
	if snap.Domain("shop") == nil || len(snap.Domain("shop").Policies) != 2 || snap.Domain("nope") != nil {
		t.Fatal("domain index wrong")
	}
}

// The version is a content hash: order and formatting don't change it, a
// changed limit does.
func TestVersionIsDeterministic(t *testing.T) {
	a, err := config.LoadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.LoadFile("testdata/good-reordered.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if a.Version != b.Version || len(a.Version) != 16 {
		t.Fatalf("versions %q and %q differ for the same policies", a.Version, b.Version)
	}
	data, _ := os.ReadFile("testdata/good.yaml")
	c, err := config.Parse("changed", []byte(strings.Replace(string(data), "limit: 10", "limit: 11", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Version == a.Version {
		t.Fatal("a changed limit kept the version")
	}
}

func TestLoadList(t *testing.T) {
	snap, err := config.LoadFile("testdata/list.yaml")
	if err != nil || len(snap.Policies) != 1 || snap.Policies[0].ID() != "x/a" {
		t.Fatalf("%v %v", snap, err)
	}
}

func TestLoadSamples(t *testing.T) {
	for _, f := range []string{"../../config/samples/policies.yaml", "../../config/samples/ratelimit_v1alpha1_ratelimitpolicy.yaml"} {
		if _, err := config.LoadFile(f); err != nil {
			t.Errorf("sample %s: %v", f, err)
		}
	}
}

// One fixture per kind of bad input; each error names the file, where in it,
// and what is wrong.
func TestLoadBad(t *testing.T) {
	// v1alpha1 fixtures are converted to v1beta1 (api/convert), and their
	// errors name v1beta1 field paths, as for a v1beta1 policy.
	want := map[string][]string{
		"rate-limit-zero.yaml":                       {"document 1", "shop/zero", "spec.limit.rate.limit"},
		"unknown-field.yaml":                         {"document 1", `unknown field "spec.brust"`},
		"wrong-kind.yaml":                            {"document 1", `kind "ConfigMap"`, `want apiVersion "ratelimit.sluice.dev/v1beta1" or "ratelimit.sluice.dev/v1alpha1"`},
		"wrong-version.yaml":                         {"document 1", `apiVersion "ratelimit.sluice.dev/v1"`},
		"not-yaml.yaml":                              {"document 1"},
		"no-name.yaml":                               {"document 1", "metadata.name"},
		"period-too-short.yaml":                      {"shop/slow", "spec.limit.rate.period", "between 1s and 720h"},
		"burst-on-window.yaml":                       {"shop/fw", "spec.limit.rate.burst", "applies only to TokenBucket and GCRA"},
		"unknown-algorithm.yaml":                     {"shop/algo", "spec.limit.rate.algorithm", "LeakyBucket"},
		"conflict.yaml":                              {"shop/second conflicts with shop/first", `domain "d"`},
		"duplicate-name.yaml":                        {"shop/same: defined twice"},
		"no-descriptors.yaml":                        {"shop/nodesc", "spec.descriptors"},
		"unknown-failure-mode.yaml":                  {"shop/mode", "spec.failureMode", `"open"`, `"Open", "Closed", "Local"`},
		"local-tier-sliding-log.yaml":                {"shop/log", "spec.limit.rate.localTier", "spec.limit.rate.localTier is not supported with SlidingLog, which stays exact"},
		"max-cost-above-capacity.yaml":               {"shop/capped", "spec.limit.rate.cost.max", "must not exceed the capacity"},
		"sliding-log-over-cap.yaml":                  {"shop/huge-log", "spec.limit.rate.limit", "at most 10000 for SlidingLog", "use SlidingWindow"},
		"concurrency-lease-zero.yaml":                {"shop/inflight", "spec.limit.concurrency.leaseDuration", "leaseDuration must be above 0s and at most 24h"},
		"concurrency-lease-over-a-day.yaml":          {"shop/inflight", "spec.limit.concurrency.leaseDuration", `"25h"`, "must be above 0s and at most 24h"},
		"concurrency-missing.yaml":                   {"shop/inflight", "spec.limit.concurrency.maxInFlight"},
		"concurrency-with-rate.yaml":                 {"shop/inflight", "spec.rate", "do not apply to algorithm Concurrency", "spec.limit.type Concurrency takes spec.limit.concurrency only"},
		"concurrency-lease-entry-is-descriptor.yaml": {"shop/inflight", "entries.lease", "spec.concurrency.leaseEntry", "must not be one of the policy's descriptor keys"},
		"reserve-sliding-log.yaml":                   {"shop/tokens", "spec.limit.rate.cost.reserve", "cost.reserve is not supported with SlidingLog"},
		"reserve-expire-over-a-day.yaml":             {"shop/tokens", "spec.limit.rate.cost.reserve.expireAfter", "expireAfter must be between 1s and 24h"},
		"calendar-not-fixed-window.yaml":             {"shop/daily", "spec.limit.rate.calendar", "applies only to FixedWindow"},
		"unknown-time-zone.yaml":                     {"shop/daily", "spec.limit.rate.calendar.timeZone", `"Europe/Atlantis"`, "time zone of the IANA database"},
		"priority-share-above-100.yaml":              {"shop/shed", "spec.limit.rate.priority.levels[0].share", "less than or equal to 100"},
		"priority-shares-increasing.yaml":            {"shop/shed", "spec.limit.rate.priority.levels", "critical=50%, batch=80%", "must not increase"},
		"penalty-over-30-days.yaml":                  {"shop/ban", "spec.limit.rate.penalty.duration", `"721h"`, "between 1s and 720h (30 days)"},
		"penalty-with-concurrency.yaml":              {"shop/inflight", "spec.penalty", "do not apply to algorithm Concurrency"},
		"penalty-with-reserve.yaml":                  {"shop/tokens", "spec.limit.rate.penalty", "not supported with cost.reserve"},
		"priority-key-is-lease-entry.yaml":           {"shop/tokens", "spec.limit.rate.priority", `"sluice_lease"`, "must not be the policy's lease entry"},
	}
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) != len(want) {
		t.Fatalf("%d fixtures, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		_, err := config.LoadFile(f)
		if err == nil {
			t.Errorf("%s: loaded", f)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, f+": ") {
			t.Errorf("%s: error does not start with the file name: %s", f, msg)
		}
		for _, w := range want[filepath.Base(f)] {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", f, msg, w)
			}
		}
	}
}

func TestLoadMissingAndHugeFiles(t *testing.T) {
	if _, err := config.LoadFile("testdata/absent.yaml"); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, 17<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadFile(big); err == nil || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Fatalf("huge file: %v", err)
	}
}
