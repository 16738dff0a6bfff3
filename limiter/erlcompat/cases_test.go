package erlcompat_test

import (
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

// Cases cover every key ERL's loader accepts (domain, key, value with and
// without a wildcard, descriptors, rate_limit, unit, requests_per_unit,
// unlimited, shadow_mode, quota_mode, name, replaces, detailed_metric,
// value_to_metric, share_threshold) and ERL's answers: the most specific
// match, unmatched descriptors, every unit, hits_addend (a request's, a
// descriptor's, 0), and denied hits that count.
var Cases = []Case{
	{
		Name: "key alone: a counter per value",
		Config: `domain: DOMAIN
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`,
		Steps: concat(times(4, one(d("user", "alice"))), times(2, one(d("user", "bob")))),
	},
	{
		Name: "a value beats the key alone",
		Config: `domain: DOMAIN
descriptors:
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5, name: any-path}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 1, name: login}
`,
		Steps: concat(times(3, one(d("path", "/login"))), times(2, one(d("path", "/home")))),
	},
	{
		Name: "nested descriptors, a limit only at the last entry, no deeper than the configuration",
		Config: `domain: DOMAIN
descriptors:
  - key: client
    value: foo
    rate_limit: {unit: day, requests_per_unit: 10}
    descriptors:
      - key: path
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: leaf
    rate_limit: {unit: day, requests_per_unit: 1}
`,
		Steps: concat(
			times(3, one(d("client", "foo", "path", "/x"))),
			times(2, one(d("client", "foo"))),
			[]Step{one(d("client", "bar", "path", "/x")), one(d("leaf", "a", "more", "b")), one(d("path", "/x"))},
			times(2, one(d("leaf", "a")))),
	},
	{
		Name: "wildcard values: by prefix, the first in file order, each value its own counter",
		Config: `domain: DOMAIN
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/admin*
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /api/exact
    rate_limit: {unit: hour, requests_per_unit: 1}
`,
		Steps: concat(times(3, one(d("path", "/api/admin/x"))), times(2, one(d("path", "/api/exact"))),
			[]Step{one(d("path", "/apix")), one(d("path", "/api/y"))}),
	},
	{
		Name: "share_threshold: every value the wildcard matches shares one counter",
		Config: `domain: DOMAIN
descriptors:
  - key: file
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    value: t-*
    share_threshold: true
    descriptors:
      - key: op
        rate_limit: {unit: minute, requests_per_unit: 1}
`,
		Steps: []Step{one(d("file", "/files/a")), one(d("file", "/files/b")), one(d("file", "/files/c")),
			one(d("tenant", "t-1", "op", "x")), one(d("tenant", "t-2", "op", "x")), one(d("tenant", "t-2", "op", "y"))},
	},
	{
		Name: "unlimited",
		Config: `domain: DOMAIN
descriptors:
  - key: internal
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
		Steps: concat(times(3, one(d("internal", "x"))), times(2, one(d("internal", "x"), d("user", "u")))),
	},
	{
		Name: "shadow_mode: over the limit is OK, with the limit's figures",
		Config: `domain: DOMAIN
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: e
    rate_limit: {unit: hour, requests_per_unit: 1}
`,
		Steps: concat(times(4, one(d("s", "1"))), times(2, one(d("s", "1"), d("e", "1")))),
	},
	{
		Name: "quota_mode: over the quota is OK, with no time to reset",
		Config: `domain: DOMAIN
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: e
    rate_limit: {unit: day, requests_per_unit: 5}
`,
		Steps: concat(times(3, one(d("q", "1"))), times(2, one(d("q", "1"), d("e", "1")))),
	},
	{
		Name: "replaces: a matched limit drops the limits it names, whatever the order",
		Config: `domain: DOMAIN
descriptors:
  - key: plan
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
`,
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
		Config: `domain: DOMAIN
descriptors:
  - key: z
    rate_limit: {unit: hour, requests_per_unit: 0}
`,
		Steps: times(2, one(d("z", "1"))),
	},
	{
		Name: "every unit, case-insensitive: windows aligned to the epoch (a month is 30 days, a year 365)",
		Config: `domain: DOMAIN
descriptors:
  - key: u
    value: minute
    rate_limit: {unit: MINUTE, requests_per_unit: 7}
  - key: u
    value: hour
    rate_limit: {unit: Hour, requests_per_unit: 7}
  - key: u
    value: day
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: u
    value: week
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: u
    value: month
    rate_limit: {unit: month, requests_per_unit: 7}
  - key: u
    value: year
    rate_limit: {unit: year, requests_per_unit: 7}
`,
		Steps: []Step{one(d("u", "minute"), d("u", "hour"), d("u", "day"), d("u", "week"), d("u", "month"), d("u", "year"))},
	},
	{
		Name: "hits_addend: the request's, a descriptor's own (0 checks only), denied hits count",
		Config: `domain: DOMAIN
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
`,
		Steps: []Step{
			{Hits: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{d("k", "1")}},
			{Hits: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(u64(0), "k", "1")}},
			{Hits: 4, Descriptors: []*ratelimitv3.RateLimitDescriptor{d("k", "1")}},
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{d("k", "1")}},
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(u64(0), "k", "1")}},
			{Hits: 9, Descriptors: []*ratelimitv3.RateLimitDescriptor{d("k", "2"), desc(u64(1), "k", "3")}},
		},
	},
	{
		Name: "metric keys change no answer: detailed_metric, value_to_metric",
		Config: `domain: DOMAIN
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`,
		Steps: times(2, one(d("route", "r", "user", "u"))),
	},
	{
		Name: "unknown domain, and a request with no matching descriptor",
		Config: `domain: DOMAIN
descriptors:
  - key: k
    value: v
    rate_limit: {unit: hour, requests_per_unit: 1}
`,
		Steps: []Step{{Domain: "no-such-domain", Descriptors: []*ratelimitv3.RateLimitDescriptor{d("k", "v")}}, one(d("k", "other")), one(d("x", "y")), one(d("k", "v"), d("x", "y")), one(d("k", "v"), d("k", "other"))},
	},
	{
		Name: "a request's own limit (the descriptor's limit field) wins, matched or not",
		Config: `domain: DOMAIN
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100, name: configured}
`,
		Steps: concat(times(3, one(withLimit(d("k", "1"), 2, typev3.RateLimitUnit_MINUTE))),
			times(2, one(withLimit(d("x", "1"), 1, typev3.RateLimitUnit_DAY))),
			times(2, one(withLimit(d("k", "2"), 0, typev3.RateLimitUnit_HOUR)))),
	},
	{
		Name: "a '*' inside a value is literal, as in the ERL this table runs (#1085 came later)",
		Config: `domain: DOMAIN
descriptors:
  - key: path
    value: /v1/*/items
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /v2/*
    rate_limit: {unit: hour, requests_per_unit: 1}
`,
		Steps: []Step{one(d("path", "/v1/x/items")), one(d("path", "/v1/*/items")), one(d("path", "/v1/*/items")),
			one(d("path", "/v2/*/deeper")), one(d("path", "/v2/*/deeper"))},
	},
	{
		Name: "second windows",
		Config: `domain: DOMAIN
descriptors:
  - key: s
    rate_limit: {unit: second, requests_per_unit: 2}
`,
		Steps: times(3, one(d("s", "1"))),
	},
}
