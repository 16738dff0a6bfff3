package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
)

// TestLoadBadClientView: one fixture per bad value of the fields that
// shape what clients are told; each error names the file, the policy and
// the field.
func TestLoadBadClientView(t *testing.T) {
	want := map[string][]string{
		"unknown-problem-type.yaml":     {"shop/typo", "spec.response.problem.type", `"quota-exceeded"`, `"QuotaExceeded", "TemporaryReducedCapacity", "AbnormalUsageDetected"`},
		"problem-detail-two-lines.yaml": {"shop/chatty", "spec.response.problem.detail", "one line of printable text"},
		"unknown-visibility.yaml":       {"shop/secret", "spec.response.visibility", `"hidden"`, `"Visible", "Hidden"`},
		"soft-shadow.yaml":              {"shop/both", "spec.soft", "spec.soft and spec.shadow are exclusive"},
		"soft-hidden.yaml":              {"shop/quiet-warning", "spec.mode", "spec.mode Soft is not supported with spec.response.visibility Hidden"},
		"soft-conflict.yaml":            {"shop/warn-b conflicts with shop/warn-a", `domain "d"`},
		"soft-penalty.yaml":             {"shop/warn", "spec.limit.rate.penalty", "spec.limit.rate.penalty does not apply to mode Soft, which never denies"},
	}
	files, _ := filepath.Glob("testdata/bad-client-view/*.yaml")
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

// TestLoadClientViewSamples loads the client-view samples with the other
// policy samples, as `kubectl apply -f config/samples/` puts them together.
func TestLoadClientViewSamples(t *testing.T) {
	dir := "../../config/samples/"
	docs := ""
	for _, f := range []string{"policies.yaml", "policies-client-view.yaml"} {
		b, err := os.ReadFile(dir + f)
		if err != nil {
			t.Fatal(err)
		}
		docs += "\n---\n" + string(b)
	}
	path := filepath.Join(t.TempDir(), "all.yaml")
	if err := os.WriteFile(path, []byte(docs), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadFile(path); err != nil {
		t.Fatal(err)
	}
}

// TestLoadSoftBesideHard: a soft limit may have the same domain and
// descriptors as one enforcing policy, its hard limit; they keep their
// own counters.
func TestLoadSoftBesideHard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "soft.yaml")
	doc := `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: warn, namespace: shop}
spec: {domain: d, descriptors: [{key: k}], rate: {limit: 8, period: 1m}, soft: true}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hard, namespace: shop}
spec: {domain: d, descriptors: [{key: k}], rate: {limit: 10, period: 1m}}
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Policies) != 2 || snap.Policies[0].Soft || !snap.Policies[1].Soft {
		t.Fatalf("policies %v, want shop/hard and the soft shop/warn", snap.Policies)
	}
	if got := snap.Domain("d").MinMaxCost(); got != 10 {
		t.Errorf("MinMaxCost %d, want 10: a soft policy caps no cost", got)
	}
}
