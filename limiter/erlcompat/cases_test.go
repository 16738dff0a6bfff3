package erlcompat_test

import (
	"fmt"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// A Case is an ERL configuration (DOMAIN stands for its domain) and the
// requests sent to ERL and to Sluice in order; every answer must match.
type Case struct {
	Name   string
	Config string
	Steps  []Step
}

// Step is one RLS request: its descriptors and request-level hits_addend
// (0: Envoy's default, one hit).
type Step struct {
	// Domain, when set, is sent instead of the case's.
	Domain      string
	Hits        uint32
	Descriptors []*ratelimitv3.RateLimitDescriptor
}

func u64(n uint64) *uint64 { return &n }

// erl is an ERL file of domain DOMAIN whose descriptors list is list
// (YAML list items, each line indented by two spaces).
func erl(list string) string { return "domain: DOMAIN\ndescriptors:\n" + list }

// hits is a step of descriptors ds with the request-level hits_addend n.
func hits(n uint32, ds ...*ratelimitv3.RateLimitDescriptor) Step {
	return Step{Hits: n, Descriptors: ds}
}

// modeCase is a limit in mode (shadow_mode or quota_mode) of rpu requests
// a unit beside an enforcing limit e of 1 a unit: steps n requests of
// the mode's key alone, then two of both.
func modeCase(name, mode, unit string, rpu, n int) Case {
	return Case{
		Name: name,
		Config: erl(fmt.Sprintf(`  - key: m
    %s: true
    rate_limit: {unit: %s, requests_per_unit: %d}
  - key: e
    rate_limit: {unit: %s, requests_per_unit: 1}
`, mode, unit, rpu, unit)),
		Steps: concat(times(n, one(d("m", "1"))), times(2, one(d("m", "1"), d("e", "1")))),
	}
}

// unitsCase is a limit of 7 a unit for each of ERL's units, written in
// the cases given (ERL's units are case-insensitive), all in one request.
func unitsCase(units ...string) Case {
	var b strings.Builder
	var ds []*ratelimitv3.RateLimitDescriptor
	for _, u := range units {
		fmt.Fprintf(&b, "  - key: u\n    value: %s\n    rate_limit: {unit: %s, requests_per_unit: 7}\n", strings.ToLower(u), u)
		ds = append(ds, d("u", strings.ToLower(u)))
	}
	return Case{
		Name:   "every unit, case-insensitive: windows aligned to the epoch (a month is 30 days, a year 365)",
		Config: erl(b.String()),
		Steps:  []Step{one(ds...)},
	}
}

// d is a descriptor without its own hits_addend.
func d(kv ...string) *ratelimitv3.RateLimitDescriptor { return desc(nil, kv...) }

// times repeats s n times.
func times(n int, s Step) []Step {
	out := make([]Step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func one(ds ...*ratelimitv3.RateLimitDescriptor) Step { return Step{Descriptors: ds} }

func concat(steps ...[]Step) []Step {
	var out []Step
	for _, s := range steps {
		out = append(out, s...)
	}
	return out
}

// Cases cover every key the ERL this table runs accepts (domain, key,
// value with and without a wildcard, descriptors, rate_limit, unit,
// requests_per_unit, unlimited, shadow_mode, quota_mode, name, replaces,
// detailed_metric, value_to_metric, share_threshold) and its answers: the
// most specific match, unmatched descriptors, every unit, hits_addend (a
// request's, a descriptor's, 0), and denied hits that count. What ERL
// added since (metadata, a '*' inside a value, quota mode over its quota)
// it answers otherwise: newer_test.go holds Sluice to those.
var Cases = []Case{
	{
		Name: "key alone: a counter per value",
		Config: erl(`  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`),
		Steps: concat(times(4, one(d("user", "alice"))), times(2, one(d("user", "bob")))),
	},
	{
		Name: "a value beats the key alone",
		Config: erl(`  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5, name: any-path}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 1, name: login}
`),
		Steps: concat(times(3, one(d("path", "/login"))), times(2, one(d("path", "/home")))),
	},
	{
		Name: "nested descriptors, a limit only at the last entry, no deeper than the configuration",
		Config: erl(`  - key: client
    value: foo
    rate_limit: {unit: day, requests_per_unit: 10}
    descriptors:
      - key: path
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: leaf
    rate_limit: {unit: day, requests_per_unit: 1}
`),
		Steps: concat(
			times(3, one(d("client", "foo", "path", "/x"))),
			times(2, one(d("client", "foo"))),
			[]Step{one(d("client", "bar", "path", "/x")), one(d("leaf", "a", "more", "b")), one(d("path", "/x"))},
			times(2, one(d("leaf", "a")))),
	},
	{
		Name: "wildcard values: by prefix, the first in file order, each value its own counter",
		Config: erl(`  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/admin*
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /api/exact
    rate_limit: {unit: hour, requests_per_unit: 1}
`),
		Steps: concat(times(3, one(d("path", "/api/admin/x"))), times(2, one(d("path", "/api/exact"))),
			[]Step{one(d("path", "/apix")), one(d("path", "/api/y"))}),
	},
	{
		Name: "share_threshold: every value the wildcard matches shares one counter",
		Config: erl(`  - key: file
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    value: t-*
    share_threshold: true
    descriptors:
      - key: op
        rate_limit: {unit: minute, requests_per_unit: 1}
`),
		Steps: []Step{one(d("file", "/files/a")), one(d("file", "/files/b")), one(d("file", "/files/c")),
			one(d("tenant", "t-1", "op", "x")), one(d("tenant", "t-2", "op", "x")), one(d("tenant", "t-2", "op", "y"))},
	},
	{
		Name: "unlimited",
		Config: erl(`  - key: internal
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`),
		Steps: concat(times(3, one(d("internal", "x"))), times(2, one(d("internal", "x"), d("user", "u")))),
	},
	modeCase("shadow_mode: over the limit is OK, with the limit's figures", "shadow_mode", "hour", 2, 4),
	// Over its quota, ERL after #1059 answers otherwise than the ERL this
	// table runs: newer_test.go holds Sluice to that.
	modeCase("quota_mode: within the quota, OK with the quota's figures", "quota_mode", "day", 5, 2),
	{
		Name: "replaces: a matched limit drops the limits it names, whatever the order",
		Config: erl(`  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 10, name: plan-limit}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 1
      name: vip-limit
      replaces:
        - name: plan-limit
  - key: burst
    rate_limit: {unit: minute, requests_per_unit: 3, name: burst-limit, replaces: [{name: vip-limit}]}
`),
		Steps: []Step{
			one(d("plan", "p")),
			one(d("plan", "p"), d("vip", "v")),
			one(d("vip", "v"), d("plan", "p")),
			one(d("vip", "v"), d("burst", "b"), d("plan", "p")),
			one(d("plan", "p")),
		},
	},
	{
		Name: "requests_per_unit 0 denies every hit",
		Config: erl(`  - key: z
    rate_limit: {unit: hour, requests_per_unit: 0}
`),
		Steps: times(2, one(d("z", "1"))),
	},
	unitsCase("MINUTE", "Hour", "day", "week", "month", "year"),
	{
		Name: "hits_addend: the request's, a descriptor's own (0 checks only), denied hits count",
		Config: erl(`  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
`),
		Steps: []Step{hits(2, d("k", "1")), hits(2, desc(u64(0), "k", "1")), hits(4, d("k", "1")), one(d("k", "1")),
			one(desc(u64(0), "k", "1")), hits(9, d("k", "2"), desc(u64(1), "k", "3"))},
	},
	{
		Name: "metric keys change no answer: detailed_metric, value_to_metric",
		Config: erl(`  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`),
		Steps: times(2, one(d("route", "r", "user", "u"))),
	},
	{
		Name: "unknown domain, and a request with no matching descriptor",
		Config: erl(`  - key: k
    value: v
    rate_limit: {unit: hour, requests_per_unit: 1}
`),
		Steps: []Step{{Domain: "no-such-domain", Descriptors: []*ratelimitv3.RateLimitDescriptor{d("k", "v")}}, one(d("k", "other")), one(d("x", "y")), one(d("k", "v"), d("x", "y")), one(d("k", "v"), d("k", "other"))},
	},
	{
		Name: "a request's own limit (the descriptor's limit field) wins, matched or not",
		Config: erl(`  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100, name: configured}
`),
		Steps: concat(times(3, one(withLimit(d("k", "1"), 2, typev3.RateLimitUnit_MINUTE))),
			times(2, one(withLimit(d("x", "1"), 1, typev3.RateLimitUnit_DAY))),
			times(2, one(withLimit(d("k", "2"), 0, typev3.RateLimitUnit_HOUR)))),
	},
	{
		Name: "second windows",
		Config: erl(`  - key: s
    rate_limit: {unit: second, requests_per_unit: 2}
`),
		Steps: times(3, one(d("s", "1"))),
	},
}
