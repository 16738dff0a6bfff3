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
		"unknown-problem-type.yaml":     {"shop/typo", "spec.problem.type", `"quota-exceeded"`, `"QuotaExceeded", "TemporaryReducedCapacity", "AbnormalUsageDetected"`},
		"problem-detail-two-lines.yaml": {"shop/chatty", "spec.problem.detail", "one line of printable text"},
		"unknown-visibility.yaml":       {"shop/secret", "spec.visibility", `"hidden"`, `"Visible", "Hidden"`},
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
