package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	yamlv2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/limiter/algo"
	"github.com/sluice-dev/sluice/limiter/compiled"
)

// envoyproxy/ratelimit (ERL) configuration, read unchanged: a file with a
// top-level domain and descriptors. Its loader is held to ERL's
// (src/config/config_impl.go of the version hack/build-erl.sh builds):
// the same YAML library (yaml.v2), the same keys accepted anywhere in the
// file, the same leaf types, and the same refusals, each naming the file.
// The differential tests (limiter/erlcompat) hold the answers to ERL's.

// ERLNamespace is the namespace of the policies compiled from ERL files:
// a policy's ID is "erl/" and ERL's full key (domain.key_value...), the
// name ERL's statistics use.
const ERLNamespace = "erl"

// erlValidKeys are the keys ERL's loader accepts, at any depth.
var erlValidKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true,
	// ERL after #1112: what Envoy is told of a descriptor answered OK.
	"metadata": true,
}

// erlUnits are ERL's units: the RLS enum value and the window, aligned to
// the Unix epoch (a month is 30 days and a year 365, as ERL counts).
var erlUnits = map[string]struct {
	enum   int32
	window time.Duration
}{
	"SECOND": {1, time.Second},
	"MINUTE": {2, time.Minute},
	"HOUR":   {3, time.Hour},
	"DAY":    {4, 24 * time.Hour},
	"MONTH":  {5, 30 * 24 * time.Hour},
	"YEAR":   {6, 365 * 24 * time.Hour},
	"WEEK":   {7, 7 * 24 * time.Hour},
}

type erlRoot struct {
	Domain      string
	Descriptors []erlDescriptor
}

type erlDescriptor struct {
	Key            string
	Value          string
	RateLimit      *erlRateLimit `yaml:"rate_limit"`
	Descriptors    []erlDescriptor
	ShadowMode     bool `yaml:"shadow_mode"`
	QuotaMode      bool `yaml:"quota_mode"`
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	ShareThreshold bool `yaml:"share_threshold"`
	Metadata       map[string]interface{}
}

type erlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string
	Unlimited       bool `yaml:"unlimited"`
	Name            string
	Replaces        []struct{ Name string }
}

// erlFile is one ERL file, parsed and compiled.
type erlFile struct {
	name     string
	root     erlRoot
	domain   string
	tree     *compiled.ERLTree
	policies []*Policy
}

// isERL tells an ERL file from a policy file by its shape: the first YAML
// document is a map without apiVersion or kind (ERL reads only the first).
func isERL(data []byte) bool {
	var m map[interface{}]interface{}
	if err := yamlv2.Unmarshal(data, &m); err != nil || len(m) == 0 {
		return false
	}
	_, api := m["apiVersion"]
	_, kind := m["kind"]
	return !api && !kind
}

// parseERL reads one ERL file as ERL's loader does: every key must be one
// ERL knows, wherever it is; leaves are strings, integers, booleans or
// null; then the file is decoded and compiled. Errors start with the
// file's name, and name the key and where it is.
func parseERL(name string, data []byte) (*erlFile, error) {
	var generic map[interface{}]interface{}
	if err := yamlv2.Unmarshal(data, &generic); err != nil {
		return nil, fmt.Errorf("%s: error loading config file: %w", name, err)
	}
	if err := validateERLKeys(name, "", generic); err != nil {
		return nil, err
	}
	var root erlRoot
	if err := yamlv2.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: error loading config file: %w", name, err)
	}
	if root.Domain == "" {
		return nil, fmt.Errorf("%s: config file cannot have empty domain", name)
	}
	f := &erlFile{name: name, root: root, domain: root.Domain, tree: compiled.NewERLTree()}
	c := erlCompiler{file: f}
	if err := c.descriptors(root.Domain+".", "descriptors", nil, root.Descriptors); err != nil {
		return nil, err
	}
	for unitName, u := range erlUnits {
		p := &Policy{
			Namespace: ERLNamespace, Name: root.Domain + ".limit_override." + strings.ToLower(unitName), Domain: root.Domain,
			// The key matches nothing: the domain's tree matches.
			Descriptors: []compiled.Descriptor{{Key: "limit_override"}},
			Limit:       algo.Limit{Algorithm: algo.FixedWindow, Period: u.window, CountDenied: true},
			MaxCost:     math.MaxInt64, MaxCostSet: true, FailureMode: compiled.FailOpen, Source: name,
			Behaviours: erlBehaviours,
			ERL:        &compiled.ERL{Unit: u.enum, Override: true},
		}
		f.tree.Overrides[u.enum] = p
		f.policies = append(f.policies, p)
	}
	return f, nil
}

// ParseERLRate parses a rate as "N/unit" in ERL's units (second to year),
// the bound of a request's own limit (limiter --erl-max-override).
func ParseERLRate(s string) (compiled.UnitRate, error) {
	n, unit, ok := strings.Cut(s, "/")
	u, valid := erlUnits[strings.ToUpper(unit)]
	var rpu uint32
	if _, err := fmt.Sscanf(n, "%d", &rpu); !ok || !valid || err != nil || fmt.Sprint(rpu) != n {
		return compiled.UnitRate{}, fmt.Errorf("%q is no rate: want REQUESTS/UNIT, REQUESTS a whole number and UNIT one of second, minute, hour, day, week, month, year", s)
	}
	return compiled.UnitRate{RequestsPerUnit: rpu, Unit: u.enum}, nil
}

// validateERLKeys is ERL's validateYamlKeys, saying where the key is.
func validateERLKeys(file, at string, m map[interface{}]interface{}) error {
	for k, v := range m {
		ks, ok := k.(string)
		if !ok {
			return fmt.Errorf("%s: %sconfig error, key is not of type string: %v", file, where(at), k)
		}
		if !erlValidKeys[ks] {
			return fmt.Errorf("%s: %sconfig error, unknown key '%s'", file, where(at), ks)
		}
		if ks == "metadata" {
			// Its keys and values are the user's, checked when it is
			// converted (erlMetadata), as ERL checks them.
			continue
		}
		path := ks
		if at != "" {
			path = at + "." + ks
		}
		switch v := v.(type) {
		case []interface{}:
			for i, e := range v {
				em, ok := e.(map[interface{}]interface{})
				if !ok {
					return fmt.Errorf("%s: %sconfig error, yaml file contains list of type other than map: %v", file, where(fmt.Sprintf("%s[%d]", path, i)), e)
				}
				if err := validateERLKeys(file, fmt.Sprintf("%s[%d]", path, i), em); err != nil {
					return err
				}
			}
		case map[interface{}]interface{}:
			if err := validateERLKeys(file, path, v); err != nil {
				return err
			}
		case string, int, bool, nil:
		default:
			return fmt.Errorf("%s: %serror checking config: key '%s' has a value of type %T (a string, an integer or a boolean is expected)", file, where(at), ks, v)
		}
	}
	return nil
}

func where(at string) string {
	if at == "" {
		return ""
	}
	return at + ": "
}

type erlCompiler struct{ file *erlFile }

// descriptors is ERL's loadDescriptors: parentKey is the full key so far
// ("domain." or "domain.key_value."), at where the list is in the file,
// levels the path to it.
func (c *erlCompiler) descriptors(parentKey, at string, levels []compiled.ERLLevel, ds []erlDescriptor) error {
	file := c.file.name
	seen := map[string]bool{}
	for i := range ds {
		d := &ds[i]
		here := fmt.Sprintf("%s[%d]", at, i)
		if d.Key == "" {
			return fmt.Errorf("%s: %s: descriptor has empty key", file, here)
		}
		finalKey := d.Key
		if d.Value != "" {
			finalKey += "_" + d.Value
		}
		fullKey := parentKey + finalKey
		if seen[finalKey] {
			return fmt.Errorf("%s: %s: duplicate descriptor composite key '%s'", file, here, fullKey)
		}
		seen[finalKey] = true
		// ERL (after #1085) matches a name holding a '*' against
		// "key_value", each '*' any run of bytes (a key alone holding one
		// is matched against "key..._value" as well).
		wildcard := strings.Contains(finalKey, "*")
		level := compiled.ERLLevel{Name: finalKey, Key: d.Key, Value: d.Value, Wildcard: wildcard}
		var p *Policy
		if d.RateLimit != nil {
			var err error
			if p, err = c.rateLimit(here, fullKey, d); err != nil {
				return err
			}
		}
		if d.ShareThreshold && !wildcard {
			return fmt.Errorf("%s: %s: share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", file, here, finalKey)
		}
		level.Share, level.ValueToMetric = d.ShareThreshold, d.ValueToMetric
		path := append(levels[:len(levels):len(levels)], level)
		md, err := erlMetadata(d.Metadata)
		if err != nil {
			return fmt.Errorf("%s: %s.metadata: error parsing metadata: %w", file, here, err)
		}
		if p != nil {
			p.ERL.Metadata = md
			p.ERL.Levels = path
			p.ERL.DetailedMetric = d.DetailedMetric
			for _, l := range path {
				p.ERL.ValueToMetric = p.ERL.ValueToMetric || l.ValueToMetric
			}
			p.Descriptors = make([]compiled.Descriptor, len(path))
			for j, l := range path {
				p.Descriptors[j] = compiled.Descriptor{Key: l.Key}
			}
			c.file.policies = append(c.file.policies, p)
		}
		c.file.tree.Add(path, p)
		if err := c.descriptors(fullKey+".", here+".descriptors", path, d.Descriptors); err != nil {
			return err
		}
	}
	return nil
}

// erlMetadata is ERL's parseMetadata: a descriptor's metadata as a
// protobuf Struct (nil for none), its maps' keys made strings. Metadata on
// a descriptor without a rate_limit is never told, as in ERL.
func erlMetadata(m map[string]interface{}) (*structpb.Struct, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]interface{}, len(m))
	for k, v := range m {
		out[k] = erlMetadataValue(v)
	}
	return structpb.NewStruct(out)
}

// erlMetadataValue is v with yaml.v2's maps made map[string]interface{}
// (a key is printed with %v, as ERL does), at any depth.
func erlMetadataValue(v interface{}) interface{} {
	switch v := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(v))
		for k, e := range v {
			m[fmt.Sprintf("%v", k)] = erlMetadataValue(e)
		}
		return m
	case []interface{}:
		l := make([]interface{}, len(v))
		for i, e := range v {
			l[i] = erlMetadataValue(e)
		}
		return l
	}
	return v
}

// rateLimit compiles d's rate_limit, refusing what ERL refuses.
func (c *erlCompiler) rateLimit(here, fullKey string, d *erlDescriptor) (*Policy, error) {
	file, rl := c.file.name, d.RateLimit
	unit, validUnit := erlUnits[strings.ToUpper(rl.Unit)]
	if rl.Unlimited && validUnit {
		return nil, fmt.Errorf("%s: %s.rate_limit: should not specify rate limit unit when unlimited", file, here)
	}
	if !rl.Unlimited && !validUnit {
		return nil, fmt.Errorf("%s: %s.rate_limit.unit: invalid rate limit unit '%s'", file, here, rl.Unit)
	}
	replaces := make([]string, len(rl.Replaces))
	for i, r := range rl.Replaces {
		if r.Name == "" {
			return nil, fmt.Errorf("%s: %s.rate_limit.replaces[%d]: should not have an empty replaces entry", file, here, i)
		}
		if r.Name == rl.Name {
			return nil, fmt.Errorf("%s: %s.rate_limit.replaces[%d]: replaces should not contain name of same descriptor", file, here, i)
		}
		replaces[i] = r.Name
	}
	window := unit.window
	if rl.Unlimited {
		window = time.Second // never counted
	}
	n := int64(rl.RequestsPerUnit)
	return &Policy{
		Namespace: ERLNamespace,
		Name:      fullKey,
		Domain:    c.file.domain,
		Limit: algo.Limit{Algorithm: algo.FixedWindow, Limit: n, Burst: n, Period: window,
			CountDenied: true},
		// ERL answers any hits_addend: more than the limit is over it.
		MaxCost: math.MaxInt64, MaxCostSet: true,
		// Shadow and quota mode never deny; ERL tells their figures
		// (erlBehaviours' ReportShadow).
		Shadow:      d.ShadowMode || d.QuotaMode,
		FailureMode: compiled.FailOpen,
		Source:      c.file.name,
		Behaviours:  erlLimitBehaviours(rl, replaces, d),
		ERL:         &compiled.ERL{Name: rl.Name, Unit: unit.enum, RequestsPerUnit: rl.RequestsPerUnit},
	}, nil
}

// erlBehaviours are what every ERL policy does: a shadow or quota mode
// limit's figures are told (with OK), and the file, the platform's, has
// no tenant to budget (nor do ERL's limits fail open for want of one).
// Each is counted in ERL's per-limit statistics; its counters count
// denied hits (algo.Limit.CountDenied), as ERL's do.
var erlBehaviours = compiled.Behaviours{ReportShadow: true, Untenanted: true, HitStats: true}

// erlLimitBehaviours are the behaviours of the limit rl of descriptor d,
// as ERL decides it: unlimited; named, and replacing others by name;
// quota_mode a Quota, shadow_mode a DryRun (a quota mode limit in shadow
// mode is never over its quota); an unlimited one keeps no statistics.
func erlLimitBehaviours(rl *erlRateLimit, replaces []string, d *erlDescriptor) compiled.Behaviours {
	b := erlBehaviours
	b.Unlimited, b.Quota, b.DryRun = rl.Unlimited, d.QuotaMode, d.ShadowMode
	if rl.Name != "" || len(replaces) > 0 {
		b.Replacement = &compiled.Replacement{Name: rl.Name, Replaces: replaces}
	}
	b.HitStats = !rl.Unlimited // an unlimited limit counts nothing
	return b
}
