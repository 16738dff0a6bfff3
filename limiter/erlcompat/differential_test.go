package erlcompat_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// attempts is how many copies of each case's domain the configuration
// holds: a step whose two answers fall in different windows (a window
// ended between the call to ERL and the call to Sluice) is not compared,
// and the case starts over on the next copy, with fresh counters.
const attempts = 6

// caseDomain is the domain of attempt a of case i.
func caseDomain(i, a int) string { return fmt.Sprintf("case%02d-a%d", i, a) }

// writeCases writes every case's attempts as ERL files into dir.
func writeCases(t *testing.T, dir string, cases []Case) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		for a := range attempts {
			name := filepath.Join(dir, caseDomain(i, a)+".yaml")
			if err := os.WriteFile(name, []byte(strings.ReplaceAll(c.Config, "DOMAIN", caseDomain(i, a))), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDifferential sends every case's requests to ERL (on a real
// redis-server) and to Sluice on the same configuration folder, on its
// memory store and on Redis, and compares the answers field by field. On
// Redis, Sluice runs as after an image swap: --erl-env with ERL's
// environment.
func TestDifferential(t *testing.T) {
	needERL(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	writeCases(t, dir, Cases)
	erl := startERL(t, root, redistest.Start(t).Addr)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var sluice rlsv3.RateLimitServiceClient
			var redis *redistest.Server
			if store == "redis" {
				redis = redistest.Start(t)
				sluice = startSluiceERLEnv(t, root, redis.Addr)
			} else {
				sluice = startSluice(t, dir, "memory")
			}
			if redis != nil {
				// --erl-env took REDIS_URL: the counters are there.
				defer func() {
					if n, err := redis.Client(t).DBSize(context.Background()).Result(); err != nil || n == 0 {
						t.Errorf("Sluice's redis-server holds %d keys (%v): --erl-env did not count there", n, err)
					}
				}()
			}
			for i, c := range Cases {
				t.Run(c.Name, func(t *testing.T) { runCase(t, erl, sluice, i, c, store) })
			}
		})
	}
}

// runCase runs c on a fresh attempt of its domain until one runs with
// every step's two answers in one window. The memory run and the Redis
// run use different attempts, since ERL's counters outlive a run.
func runCase(t *testing.T, erl, sluice rlsv3.RateLimitServiceClient, i int, c Case, store string) {
	first := 0
	if store == "redis" {
		first = attempts / 2
	}
	var crossed string
	for a := first; a < first+attempts/2; a++ {
		crossed = ""
		for j, st := range c.Steps {
			domain := caseDomain(i, a)
			if st.Domain != "" {
				domain = st.Domain
			}
			req := request(domain, st.Hits, st.Descriptors...)
			t0 := time.Now()
			want, errE := call(erl, req)
			got, errS := call(sluice, req)
			t1 := time.Now()
			if errE != nil || errS != nil {
				t.Fatalf("step %d: ERL error %v, Sluice error %v\nrequest %s", j, errE, errS, prototext.Format(req))
			}
			if w := crossedWindow(want, t0, t1); w != "" {
				crossed = fmt.Sprintf("step %d: a %s window ended between the two calls", j, w)
				break
			}
			if diff := compare(want, got, t0, t1); diff != "" {
				t.Fatalf("step %d: %s\nrequest  %s\nERL      %s\nSluice   %s", j, diff, prototext.Format(req), prototext.Format(want), prototext.Format(got))
			}
		}
		if crossed == "" {
			return
		}
		t.Logf("attempt %d: %s; starting over on the next copy", a, crossed)
	}
	t.Fatalf("every attempt had a window end between the calls to ERL and Sluice; last: %s", crossed)
}

func call(c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, req)
}

// unitSeconds are ERL's windows, by RLS unit.
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1, rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR: 3600, rlsv3.RateLimitResponse_RateLimit_DAY: 86400,
	rlsv3.RateLimitResponse_RateLimit_WEEK: 7 * 86400, rlsv3.RateLimitResponse_RateLimit_MONTH: 30 * 86400,
	rlsv3.RateLimitResponse_RateLimit_YEAR: 365 * 86400,
}

// crossedWindow names a unit of resp's limits whose window changed
// between t0 and t1, or "".
func crossedWindow(resp *rlsv3.RateLimitResponse, t0, t1 time.Time) string {
	for _, st := range resp.GetStatuses() {
		if l := st.GetCurrentLimit(); l != nil {
			u := unitSeconds[l.GetUnit()]
			if t0.Unix()/u != t1.Unix()/u {
				return l.GetUnit().String()
			}
		}
	}
	return ""
}

// compare says how got (Sluice's) differs from want (ERL's): the overall
// code, and per descriptor the code, current_limit (name, requests per
// unit, unit, multiplier), limit_remaining, and duration_until_reset, which
// must be present in both or neither, and in both what is left of the
// limit's epoch-aligned window in whole seconds at some time between t0
// and t1.
func compare(want, got *rlsv3.RateLimitResponse, t0, t1 time.Time) string {
	if want.GetOverallCode() != got.GetOverallCode() {
		return fmt.Sprintf("overall_code: ERL %v, Sluice %v", want.GetOverallCode(), got.GetOverallCode())
	}
	if len(want.GetStatuses()) != len(got.GetStatuses()) {
		return fmt.Sprintf("statuses: ERL %d, Sluice %d", len(want.GetStatuses()), len(got.GetStatuses()))
	}
	for i, w := range want.GetStatuses() {
		g := got.GetStatuses()[i]
		if w.GetCode() != g.GetCode() {
			return fmt.Sprintf("statuses[%d].code: ERL %v, Sluice %v", i, w.GetCode(), g.GetCode())
		}
		wl, gl := w.GetCurrentLimit(), g.GetCurrentLimit()
		if (wl == nil) != (gl == nil) || wl.GetName() != gl.GetName() || wl.GetRequestsPerUnit() != gl.GetRequestsPerUnit() ||
			wl.GetUnit() != gl.GetUnit() || wl.GetUnitMultiplier().GetValue() != gl.GetUnitMultiplier().GetValue() {
			return fmt.Sprintf("statuses[%d].current_limit: ERL %v, Sluice %v", i, wl, gl)
		}
		if w.GetLimitRemaining() != g.GetLimitRemaining() {
			return fmt.Sprintf("statuses[%d].limit_remaining: ERL %d, Sluice %d", i, w.GetLimitRemaining(), g.GetLimitRemaining())
		}
		wd, gd := w.GetDurationUntilReset(), g.GetDurationUntilReset()
		if (wd == nil) != (gd == nil) {
			return fmt.Sprintf("statuses[%d].duration_until_reset: ERL %v, Sluice %v", i, wd, gd)
		}
		if wd == nil {
			continue
		}
		u := unitSeconds[wl.GetUnit()]
		lo, hi := u-t1.Unix()%u, u-t0.Unix()%u
		for who, dd := range map[string]int64{"ERL": wd.GetSeconds(), "Sluice": gd.GetSeconds()} {
			if dd < lo || dd > hi || (who == "Sluice" && gd.GetNanos() != 0) {
				return fmt.Sprintf("statuses[%d].duration_until_reset: %s %v, want whole seconds in [%d, %d] (ERL %v, Sluice %v)", i, who, dd, lo, hi, wd, gd)
			}
		}
	}
	return ""
}
