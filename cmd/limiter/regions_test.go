package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api/limiterwire"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testnet"
	"github.com/sluice-dev/sluice/internal/testpki"
	"github.com/sluice-dev/sluice/internal/testtier"
	"github.com/sluice-dev/sluice/limiter/regions"
)

// regionPolicies: per user, Global, 300 an hour; per IP, Region-scoped.
const regionPolicies = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-user, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: user}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 300, period: 1h, scope: Global}
---
apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: shop}
spec:
  domain: shop
  descriptors: [{key: ip}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 50, period: 1h}
`

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func peerToken(name string) string { return strings.Repeat(name, 40) }

// TestRegionsOfLimiters runs three limiter processes as three regions,
// each with its own redis-server, their peer endpoints 80ms apart through
// proxies. A Global per-user limit holds across them within its bound
// under 60/30/10 load; per-IP (Region-scoped) traffic sends no message to
// another region; each admin plane shows its peers reachable.
func TestRegionsOfLimiters(t *testing.T) {
	testtier.Integration(t, "redis-server")
	names := []string{"a", "b", "c"}
	procs := startRegionLimiters(t, regionPolicies, names)
	check := func(p *process, key, value string) bool {
		code, _, body := p.post(t, "/v1/ratelimit/check", `{"domain":"shop","descriptors":[{"entries":[{"key":"`+key+`","value":"`+value+`"}]}]}`)
		if code != 200 && code != 429 {
			t.Fatalf("check: %d %s", code, body)
		}
		return code == 200
	}
	grantCalls := func() float64 {
		var n float64
		for _, p := range procs {
			for _, m := range p.metrics(t)["sluice_region_grant_calls_total"].GetMetric() {
				n += sampleValue(m)
			}
		}
		return n
	}

	// Per-IP traffic, Region-scoped: no message to another region.
	for _, n := range names {
		for range 60 {
			check(procs[n], "ip", "192.0.2.7")
		}
	}
	if calls := grantCalls(); calls != 0 {
		t.Fatalf("Region-scoped traffic sent %v grant calls to other regions, want 0", calls)
	}

	// Per-user traffic, Global, 60/30/10, until 50 rounds in a row admit
	// nothing.
	admitted := map[string]int{}
	idle := 0
	for round := 0; idle < 50; round++ {
		if round > 20000 {
			t.Fatal("the regions never stopped admitting")
		}
		any := false
		for i, n := range names {
			for range []int{6, 3, 1}[i] {
				if check(procs[n], "user", "alice") {
					admitted[n]++
					any = true
				}
			}
		}
		if any {
			idle = 0
		} else {
			idle++
		}
	}
	total := admitted["a"] + admitted["b"] + admitted["c"]
	bound := 2 * len(names) * max(1, 300/(regions.GrantDivisor*len(names))) // B = 2·N·g
	t.Logf("admitted %v = %d of a Global 300 (bound %d); %v grant calls", admitted, total, bound, grantCalls())
	if total > 300+bound {
		t.Fatalf("the regions admitted %d: want at most the limit 300 + bound %d", total, bound)
	}
	if admitted["a"] == 0 || admitted["b"] == 0 || admitted["c"] == 0 {
		t.Fatalf("admitted %v: every region should have admitted some", admitted)
	}
	// Each limiter reports the Global policy's bound (the operator copies
	// it into status.enforcement.overshootBound), and none for per-IP.
	_, body := procs["c"].adminGet(t, limiterwire.StatsPath)
	var stats limiterwire.Stats
	if err := json.Unmarshal([]byte(body), &stats); err != nil {
		t.Fatal(err)
	}
	for _, ps := range stats.Policies {
		switch {
		case ps.Name == "per-user" && (ps.Regions == nil || ps.Regions.ReachBound != int64(bound) || ps.Regions.Bound < int64(bound+3*99) || ps.Regions.Regions != 3):
			t.Errorf("per-user stats: regions %+v, want reachBound %d of 3 regions, and a bound with the 3 shares of 99 at least", ps.Regions, bound)
		case ps.Name == "per-ip" && ps.Regions != nil:
			t.Errorf("per-ip (Region) stats: regions %+v, want none", ps.Regions)
		}
	}
	for _, n := range names {
		code, body := procs[n].adminGet(t, limiterwire.RegionsPath)
		var st regions.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
			t.Fatalf("%s %s: %d %s", n, limiterwire.RegionsPath, code, body)
		}
		if st.Region != n || len(st.Peers) != 2 {
			t.Fatalf("%s says %+v", n, st)
		}
		for _, p := range st.Peers {
			// A peer this region never needed (it homes nothing of
			// alice's) has had no exchange.
			if p.Reason != regions.ReasonReachable && p.Reason != regions.ReasonNoExchange {
				t.Errorf("%s sees %s as %+v", n, p.Name, p)
			}
		}
	}
}

// startRegionLimiters runs a limiter process per region name on policies,
// each with its own redis-server, their peer endpoints 80ms apart through
// proxies, over mutual TLS: each region a certificate named after it.
func startRegionLimiters(t *testing.T, policies string, names []string) map[string]*process {
	t.Helper()
	dir := t.TempDir()
	pol := writeFile(t, dir, "policies.yaml", policies)
	ca := testpki.NewCA(t, "regions CA")
	caFile := ca.WriteCA(t, dir)
	peerAddr := map[string]string{}
	for i, n := range names {
		peerAddr[n] = redistest.FreeAddr(t, testnet.IP(60+i))
	}
	procs := map[string]*process{}
	for i, n := range names {
		rs := redistest.StartAt(t, redistest.FreeAddr(t, testnet.IP(60+i)))
		certFile, keyFile := testpki.Write(t, dir, n, ca.Issue(t, n, redistest.Host(), testnet.IP(60+i)))
		args := []string{"--policies", pol, "--store", "redis://" + rs.Addr, "--redis-timeout", "2s",
			"--region", n, "--peer-cert-file", certFile, "--peer-key-file", keyFile, "--peer-ca-file", caFile, "--peer-addr", peerAddr[n],
			// A loaded machine may take seconds to answer: no region is
			// cut off here.
			"--peer-timeout", "1m"}
		for _, m := range names {
			if m == n {
				continue
			}
			px := redistest.StartProxy(t, peerAddr[m])
			px.SetLatency(80 * time.Millisecond)
			args = append(args, "--peer", m+"=https://"+px.Addr)
		}
		procs[n] = startLimiter(t, args...)
	}
	return procs
}

// modePolicies: per user, Global, 10 an hour, in Shadow mode and in
// Soft mode.
const modePolicies = `apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: shadow-user, namespace: shop}
spec:
  domain: modes
  descriptors: [{key: s}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 10, period: 1h, scope: Global}
  mode: Shadow
---
apiVersion: ratelimit.sluice.dev/v1beta1
kind: RateLimitPolicy
metadata: {name: soft-user, namespace: shop}
spec:
  domain: modes
  descriptors: [{key: t}]
  limit:
    type: Rate
    rate: {algorithm: FixedWindow, limit: 10, period: 1h, scope: Global}
  mode: Soft
`

// TestRegionsGlobalModes: a Global policy in Shadow or Soft mode never
// denies, in any region, while its count still holds across the regions:
// over 60 requests from two regions, at most the limit and the bound are
// counted allowed, the rest shadow- or soft-limited (none
// limited), and the requests a soft policy is over say so.
func TestRegionsGlobalModes(t *testing.T) {
	testtier.Integration(t, "redis-server")
	names := []string{"a", "b"}
	procs := startRegionLimiters(t, modePolicies, names)
	const sent = 60
	softMarked := 0
	for _, key := range []string{"s", "t"} {
		for i := range sent {
			p := procs[names[i%2]]
			code, h, body := p.post(t, "/v1/ratelimit/check", `{"domain":"modes","descriptors":[{"entries":[{"key":"`+key+`","value":"alice"}]}]}`)
			if code != 200 {
				t.Fatalf("%s request %d to region %s: %d %s, want 200 (Shadow and Soft never deny)", key, i, names[i%2], code, body)
			}
			if key == "t" && h.Get("X-Sluice-Soft-Limit") != "" {
				softMarked++
			}
		}
	}
	sum := map[string]limiterwire.PolicyStats{}
	for _, n := range names {
		_, body := procs[n].adminGet(t, limiterwire.StatsPath)
		var stats limiterwire.Stats
		if err := json.Unmarshal([]byte(body), &stats); err != nil {
			t.Fatal(err)
		}
		for _, ps := range stats.Policies {
			s := sum[ps.Name]
			s.Allowed += ps.Allowed
			s.Limited += ps.Limited
			s.ShadowLimited += ps.ShadowLimited
			s.SoftLimited += ps.SoftLimited
			sum[ps.Name] = s
		}
	}
	bound := int64(2 * len(names) * max(1, 10/(regions.GrantDivisor*len(names)))) // B = 2·N·g
	for name, over := range map[string]func(limiterwire.PolicyStats) int64{
		"shadow-user": func(s limiterwire.PolicyStats) int64 { return s.ShadowLimited },
		"soft-user":   func(s limiterwire.PolicyStats) int64 { return s.SoftLimited },
	} {
		s := sum[name]
		t.Logf("%s: allowed %d, over %d, limited %d (limit 10, bound %d)", name, s.Allowed, over(s), s.Limited, bound)
		if s.Limited != 0 || s.Allowed+over(s) != sent {
			t.Errorf("%s: %+v: want every one of %d requests counted, allowed or over, none limited", name, s, sent)
		}
		// Fewer than the limit when a region held units of a grant while
		// the other was refused one: fewer admitted, never more.
		if s.Allowed == 0 || s.Allowed > 10+bound {
			t.Errorf("%s: %d counted allowed across the regions, want some and at most the limit 10 + bound %d", name, s.Allowed, bound)
		}
	}
	if want := int64(sent) - sum["soft-user"].Allowed; int64(softMarked) != want {
		t.Errorf("%d answers carried X-Sluice-Soft-Limit, want the %d counted over the soft limit", softMarked, want)
	}
}

// TestRegionFlagsRefused: bad region flags stop the limiter with an error
// that names what is wrong.
func TestRegionFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, dir, "policies.yaml", regionPolicies)
	good := writeFile(t, dir, "good.token", peerToken("a"))
	short := writeFile(t, dir, "short.token", "short")
	ca := testpki.NewCA(t, "regions CA")
	caFile := ca.WriteCA(t, dir)
	certA, keyA := testpki.Write(t, dir, "a", ca.Issue(t, "a"))
	certB, keyB := testpki.Write(t, dir, "b", ca.Issue(t, "b"))
	redis := []string{"--store", "redis://127.0.0.1:1", "--region", "a"}
	tlsA := append(slices.Clone(redis), "--peer-cert-file", certA, "--peer-key-file", keyA, "--peer-ca-file", caFile)
	lab := append(slices.Clone(redis), "--peer-insecure-lab", "--region-token-file", good)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"peers with the memory store", []string{"--region", "a", "--peer-insecure-lab", "--region-token-file", good, "--peer", "b=http://127.0.0.1:1", "--peer-token-file", "b=" + good},
			"--region a with peers needs a Redis --store"},
		{"plain HTTP peer without the lab flag", append(slices.Clone(tlsA), "--peer", "b=http://127.0.0.1:1"),
			"--peer b=http://127.0.0.1:1: plain HTTP lets anyone on the path act as a region; give an https:// endpoint (mutual TLS), or --peer-insecure-lab in a lab"},
		{"peer without certificates", append(slices.Clone(redis), "--peer", "b=https://127.0.0.1:1"),
			"--peer needs --peer-cert-file, --peer-key-file and --peer-ca-file (mutual TLS between regions), or --peer-insecure-lab in a lab"},
		{"tokens without the lab flag", append(slices.Clone(tlsA), "--region-token-file", good, "--peer", "b=https://127.0.0.1:1"),
			"--region-token-file and --peer-token-file are the insecure lab's (--peer-insecure-lab)"},
		{"another region's certificate", append(slices.Clone(redis), "--peer-cert-file", certB, "--peer-key-file", keyB, "--peer-ca-file", caFile, "--peer", "b=https://127.0.0.1:1"),
			`--peer-cert-file: its Common Name is "b", want this region's name "a" (--region)`},
		{"certificate and key that differ", append(slices.Clone(redis), "--peer-cert-file", certA, "--peer-key-file", keyB, "--peer-ca-file", caFile, "--peer", "b=https://127.0.0.1:1"),
			"--peer-cert-file certificate " + certA + " and key " + keyB},
		{"lab peer without its token", append(slices.Clone(lab), "--peer", "b=http://127.0.0.1:1"),
			"--peer b: give its token with --peer-token-file b=FILE"},
		{"short lab token", []string{"--store", "redis://127.0.0.1:1", "--region", "a", "--peer-insecure-lab", "--region-token-file", short, "--peer", "b=http://127.0.0.1:1", "--peer-token-file", "b=" + good},
			"is 5 bytes, want at least 32"},
		{"token for no peer", []string{"--region", "a", "--peer-token-file", "b=" + good}, "--peer-token-file b: no --peer b=URL"},
		{"peer without region", []string{"--store", "redis://127.0.0.1:1", "--peer", "b=https://127.0.0.1:1"},
			"--peer, --region-token-file and --partition-share need --region"},
		{"peer URL with a path", append(slices.Clone(tlsA), "--peer", "b=https://h/x"),
			`endpoint "https://h/x" must be an https URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, limiterBin, append([]string{"--policies", pol, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("limiter %v: %v, want a non-zero exit\n%s", tc.args, err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("the limiter's output does not say %q:\n%s", tc.want, fmt.Sprint(string(out)))
			}
		})
	}
}
