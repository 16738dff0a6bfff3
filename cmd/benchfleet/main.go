// Command benchfleet measures two-tier mode (spec.localTier) with real
// processes: it starts one redis-server and N limiter processes on
// loopback, drives one key through them at multiples of its limit (evenly,
// and skewed 80% to one pod), and prints for each case the admitted units
// against the exact algorithm's allowance (the overshoot, beside the bound
// the limiters report), the denials while under the limit (false
// denials), Redis commands per decision from INFO commandstats, decisions
// per second and p99 latency. The same key driven through the same pods
// with localTier off is the exact-mode baseline.
//
//	benchfleet --limiter bin/limiter --pods 1,4,10 --duration 3s
//
// make bench-fleet runs it (hack/bench-fleet.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// policySpec is the benchmark policy.
type policySpec struct {
	algorithm    string
	limit, burst int64
	period       time.Duration
	maxOvershoot string
	ttl          time.Duration
}

func (p policySpec) yaml() string {
	burst := ""
	if p.algorithm == "TokenBucket" || p.algorithm == "GCRA" {
		burst = fmt.Sprintf("\n  burst: %d", p.burst)
	}
	doc := func(name, tier string) string {
		return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: %s, namespace: bench}
spec:
  domain: %s
  descriptors: [{key: user_id}]
  algorithm: %s
  rate: {limit: %d, period: %s}%s%s
`, name, name, p.algorithm, p.limit, p.period, burst, tier)
	}
	return doc("fleet", fmt.Sprintf("\n  localTier: {enabled: true, ttl: %s, maxOvershoot: %q}", p.ttl, p.maxOvershoot)) +
		"---\n" + doc("fleet-exact", "")
}

// loadCase is one way of driving the key.
type loadCase struct {
	name  string
	load  float64 // of the limit
	skew  float64 // share of the first pod; 0 spreads evenly
	exact bool    // localTier off
}

var cases = []loadCase{
	{name: "2x", load: 2},
	{name: "1x", load: 1},
	{name: "0.9x", load: 0.9},
	{name: "0.5x", load: 0.5},
	{name: "skew 0.9x", load: 0.9, skew: 0.8},
	{name: "1x exact", load: 1, exact: true},
	{name: "0.9x exact", load: 0.9, exact: true},
}

func main() {
	var (
		p        policySpec
		pods     string
		limiter  string
		redisBin string
		duration time.Duration
		only     string
	)
	flag.StringVar(&p.algorithm, "algorithm", "TokenBucket", "TokenBucket, GCRA or FixedWindow")
	flag.Int64Var(&p.limit, "limit", 10000, "rate.limit of the key")
	flag.DurationVar(&p.period, "period", 10*time.Second, "rate.period")
	flag.Int64Var(&p.burst, "burst", 1000, "burst (TokenBucket, GCRA)")
	flag.StringVar(&p.maxOvershoot, "max-overshoot", "5%", "localTier.maxOvershoot")
	flag.DurationVar(&p.ttl, "ttl", 2*time.Second, "localTier.ttl")
	flag.StringVar(&pods, "pods", "1,4,10", "limiter processes per run, comma-separated")
	flag.StringVar(&limiter, "limiter", "bin/limiter", "limiter binary")
	flag.StringVar(&redisBin, "redis-server", "redis-server", "redis-server binary")
	flag.DurationVar(&duration, "duration", 3*time.Second, "load per case")
	flag.StringVar(&only, "cases", "", "run only these cases, comma-separated (2x, 1x, 0.9x, 0.5x, skew 0.9x, 1x exact, 0.9x exact); empty runs all")
	flag.Parse()
	if only != "" {
		cases = slices.DeleteFunc(cases, func(c loadCase) bool { return !slices.Contains(strings.Split(only, ","), c.name) })
		if len(cases) == 0 {
			fail(fmt.Errorf("--cases %q: no such case", only))
		}
	}
	switch p.algorithm {
	case "TokenBucket", "GCRA", "FixedWindow":
	default:
		fail(fmt.Errorf("--algorithm %q: want TokenBucket, GCRA or FixedWindow", p.algorithm))
	}
	var ns []int
	for _, s := range strings.Split(pods, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 50 {
			fail(fmt.Errorf("--pods %q: want numbers from 1 to 50", pods))
		}
		ns = append(ns, n)
	}
	if _, err := exec.LookPath(redisBin); err != nil {
		fail(fmt.Errorf("redis-server not found (%v): make deps installs it", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p, ns, limiter, redisBin, duration); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchfleet:", err)
	os.Exit(1)
}

func run(ctx context.Context, p policySpec, ns []int, limiterBin, redisBin string, d time.Duration) error {
	dir, err := os.MkdirTemp("", "benchfleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	policies := dir + "/policies.yaml"
	if err := os.WriteFile(policies, []byte(p.yaml()), 0o600); err != nil {
		return err
	}
	rp, rc, err := startRedis(dir, redisBin)
	if err != nil {
		return err
	}
	defer rp.stop()
	defer rc.Close()

	fmt.Printf("policy: %s %d per %s", p.algorithm, p.limit, p.period)
	if p.algorithm != "FixedWindow" {
		fmt.Printf(", burst %d", p.burst)
	}
	fmt.Printf("; localTier ttl %s, maxOvershoot %s; %s of load per case\n", p.ttl, p.maxOvershoot, d)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pods\tcase\toffered/s\tadmitted\tallowance\tovershoot (% of limit)\tbound\tadmitted/limit per window\tdenied\tfalse denials\tlocal/grant/cached\tevalsha/dec\tcmds/dec\tdecisions/s\tp99\terrors\tlimiters µs/dec\tredis µs/dec\t")
	for _, n := range ns {
		if err := runPods(ctx, tw, p, n, policies, dir, limiterBin, rp, rc, d); err != nil {
			return err
		}
	}
	tw.Flush()
	fmt.Println(`
allowance: the most the exact algorithm admits over the run (burst + limit·elapsed/period for a
  bucket from full; limit per epoch-aligned window touched for FixedWindow); overshoot: admitted
  beyond it (FixedWindow: the largest excess of one window), in units, as measured by this driver's
  clock (midway between send and answer).
bound: the overshoot bound the limiters report on /v1/admin/stats (localTier.overshootBound).
At and above the limit a bucket starts empty (one call spends its burst first), so that any
  overshoot shows; under the limit it starts full, as an idle key does.
false denials: denials while the offered load is under the limit and evenly paced, when the exact
  algorithm denies nothing ("-" at or above the limit).
local/grant/cached: the limiters' two-tier decisions by path: spent from a grant, one grant call,
  the over-limit cache.
evalsha/dec: script round trips (EVALSHA+EVAL) per decision; cmds/dec: every command Redis counted
  per decision, those run inside the scripts included (INFO commandstats, credits after the load
  included).
limiters µs/dec, redis µs/dec: CPU (utime+stime from /proc) of every limiter process and of the
  redis-server while the case's load ran, per decision; the driver runs beside them on the same
  cores and its wake-ups are not counted.`)
	return nil
}

func runPods(ctx context.Context, tw *tabwriter.Writer, p policySpec, n int, policies, dir, limiterBin string, rp *proc, rc *goredis.Client, d time.Duration) error {
	ls, err := startLimiters(dir, limiterBin, policies, rc.Options().Addr, n)
	defer func() {
		for _, l := range ls {
			l.stop()
		}
	}()
	if err != nil {
		return err
	}
	clients, closeAll, err := dial(ls)
	if err != nil {
		return err
	}
	defer closeAll()
	for _, c := range cases {
		if c.skew > 0 && n == 1 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		domain := "fleet"
		if c.exact {
			domain = "fleet-exact"
		}
		rate := c.load * float64(p.limit) / p.period.Seconds()
		key := fmt.Sprintf("n%d-%s-%d", n, strings.ReplaceAll(c.name, " ", "-"), time.Now().UnixNano())
		before := fleetTier(ls)
		if err := rc.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
		var ss []sample
		lcpu0, rcpu0 := cpuSeconds(limiterProcs(ls)...), cpuSeconds(rp)
		if c.load >= 1 && p.algorithm != "FixedWindow" {
			s, err := drain(ctx, clients[0], domain, key, p.burst)
			if err != nil {
				return err
			}
			ss = append(ss, s)
		}
		ss = append(ss, drive(ctx, clients, shares(rate, n, c.skew), domain, key, d)...)
		lcpu, rcpu := cpuSeconds(limiterProcs(ls)...)-lcpu0, cpuSeconds(rp)-rcpu0
		slices.SortFunc(ss, func(a, b sample) int { return int(a.at - b.at) })
		if !c.exact {
			time.Sleep(p.ttl + 300*time.Millisecond) // the grants' credits land, and count
		}
		scripts, all, err := commandStats(ctx, rc)
		if err != nil {
			return err
		}
		r := analyse(ss, p)
		bound, paths := "-", "-"
		if !c.exact {
			after := fleetTier(ls)
			bound = strconv.FormatInt(after.OvershootBound, 10)
			paths = fmt.Sprintf("%d/%d/%d", after.Local-before.Local, after.Grants-before.Grants, after.CachedDenials-before.CachedDenials)
		}
		falseDenials := "-"
		if c.load < 1 {
			falseDenials = strconv.FormatInt(r.denied, 10)
		}
		perDec := func(sec float64) float64 { return 1e6 * sec / float64(max(1, r.decisions)) }
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%d\t%d (%.1f%%)\t%s\t%s\t%d\t%s\t%s\t%.3f\t%.3f\t%.0f\t%s\t%d\t%.1f\t%.1f\t\n",
			n, c.name, rate, r.admitted, r.allowance, r.overshoot, 100*float64(r.overshoot)/float64(p.limit), bound,
			fmtWindows(r.windows), r.denied, falseDenials, paths,
			float64(scripts)/float64(max(1, r.decisions)), float64(all)/float64(max(1, r.decisions)),
			r.perSecond, r.p99.Round(10*time.Microsecond), r.errors, perDec(lcpu), perDec(rcpu))
	}
	return nil
}
