package controllers

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
)

// The alert rules parse, and the operator metrics they use exist.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("../config/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
				For   string `json:"for"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	descs := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range append(append(observe.Metrics(), redisfleet.Metrics()...), snapshotCompileSeconds, snapshotBytes) {
			c.Describe(descs)
		}
		close(descs)
	}()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		known[name.FindStringSubmatch(d.String())[1]] = true
	}
	want := map[string]bool{"SluicePolicyNotEnforced": true, "SluicePolicyDegraded": true, "SluiceRedisBreakerOpen": true, "SluiceRedisNotReady": true, "SluiceRedisDataLoss": true,
		"SluiceRedisMemoryNearLimit": true}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			delete(want, r.Alert)
			if r.Expr == "" || r.For == "" {
				t.Errorf("alert %s lacks expr or for", r.Alert)
			}
			for _, m := range regexp.MustCompile(`sluice_operator_\w+`).FindAllString(r.Expr, -1) {
				if !known[m] {
					t.Errorf("alert %s uses %s, which the operator does not export", r.Alert, m)
				}
			}
			if r.Alert == "SluiceRedisMemoryNearLimit" && !strings.HasSuffix(r.Expr, " >= "+strconv.FormatFloat(redisfleet.MemoryNearLimitRatio, 'g', -1, 64)) {
				t.Errorf("alert %s: %q does not fire at redisfleet.MemoryNearLimitRatio (%v), where RedisReady turns False", r.Alert, r.Expr, redisfleet.MemoryNearLimitRatio)
			}
			if strings.Contains(r.Expr, "sluice_redis_breaker_state") && !strings.Contains(r.Expr, "== 1") {
				t.Errorf("alert %s: the breaker is open at 1", r.Alert)
			}
		}
	}
	for a := range want {
		t.Errorf("no alert %s", a)
	}
}
