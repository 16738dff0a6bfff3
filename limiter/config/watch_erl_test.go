package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/limiter/config"
)

func erlFile(limit int) string {
	return fmt.Sprintf("domain: erl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", limit)
}

// TestWatchERLFolder: a folder of an ERL file and a policy file is
// reloaded when either changes, or a file comes; a bad ERL file is refused
// naming the file and the key, and the last good configuration stays.
func TestWatchERLFolder(t *testing.T) {
	dir := t.TempDir()
	erl := filepath.Join(dir, "erl.yaml")
	write(t, erl, erlFile(3))
	write(t, filepath.Join(dir, "policies.yaml"), policyFile(5, "a"))
	w := startWatch(t, dir)
	s := w.load(t)
	user := func() *config.Policy {
		for _, p := range s.Domain("erl").Policies {
			if p.Name == "erl.user" {
				return p
			}
		}
		t.Fatalf("no policy erl/erl.user in %d policies", len(s.Domain("erl").Policies))
		return nil
	}
	limits := func() (int64, int64) {
		return user().Limit.Limit, s.Domain("shop").Policies[0].Limit.Limit
	}
	if e, p := limits(); e != 3 || p != 5 {
		t.Fatalf("first load: ERL limit %d, policy limit %d; want 3 and 5", e, p)
	}
	writeAtomic(t, erl, erlFile(4))
	if s = w.load(t); func() bool { e, _ := limits(); return e != 4 }() {
		t.Fatalf("after the ERL file changed: %v", user().Limit)
	}
	writeAtomic(t, erl, erlFile(4)+"    burst: 9\n")
	if err := w.err(t); !strings.Contains(err.Error(), erl) || !strings.Contains(err.Error(), "unknown key 'burst'") {
		t.Fatalf("a bad ERL file: %v, want its name and the key", err)
	}
	w.noLoad(t)
	write(t, filepath.Join(dir, "more.yaml"), "domain: erl-more\n")
	if err := w.err(t); !strings.Contains(err.Error(), "unknown key 'burst'") {
		t.Fatalf("a new file beside the bad one: %v, want the bad file still refused", err)
	}
	writeAtomic(t, erl, erlFile(6))
	if s = w.load(t); s.Domain("erl-more") == nil || func() bool { e, _ := limits(); return e != 6 }() {
		t.Fatalf("after the fix: domain erl-more %v, limit %v", s.Domain("erl-more"), user().Limit)
	}
	if err := os.Remove(filepath.Join(dir, "policies.yaml")); err != nil {
		t.Fatal(err)
	}
	if s = w.load(t); s.Domain("shop") != nil {
		t.Fatal("the removed policy file's domain is still served")
	}
}
