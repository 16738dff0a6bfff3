package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// erlPeriods are ERL's units as a v1beta1 rate.period ("" where none fits
// the API's 1s to 720h: a year).
var erlPeriods = map[string]string{
	"SECOND": "1s", "MINUTE": "1m", "HOUR": "1h", "DAY": "24h", "WEEK": "168h", "MONTH": "720h", "YEAR": "",
}

// ConvertERL writes, for the ERL files at path (a file or a folder, read as
// LoadPath reads them; a folder's policy files are left out), one v1beta1
// RateLimitPolicy in namespace per ERL rate limit, each with a comment on
// what it can't say as ERL does, and the LimiterFleet spec.domains entries
// that let namespace use the domains. A limit with no equivalent is
// written as a comment. The files must load (LoadPath's refusals).
func ConvertERL(path, namespace string, w io.Writer) error {
	files, err := erlFiles(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, `# RateLimitPolicies converted from envoyproxy/ratelimit configuration (limiter convert-erl).
# What differs everywhere: a policy matches a request that carries all of its
# descriptors' keys, in any order and among other entries, and every matching
# policy decides (the most restrictive answer wins), where ERL applies only the
# most specific limit of a descriptor whose entries follow its tree exactly;
# a FixedWindow does not count denied hits, which ERL does; a request's own
# limit (the RLS descriptor's limit field) is ignored unless the policy opts
# in with spec.limit.rate.requestOverride and its maximum (not set here).
`)
	for _, f := range files {
		c := converter{w: w, file: f, namespace: namespace, seen: map[string]string{}}
		c.descriptors(f.root.Domain, nil, f.root.Descriptors)
	}
	fmt.Fprintf(w, "\n# The LimiterFleet that serves them needs, in its spec.domains:\n")
	for _, f := range files {
		fmt.Fprintf(w, "#   - name: %s\n#     allowedNamespaces:\n#       from: Selector\n#       selector: {matchLabels: {kubernetes.io/metadata.name: %s}}\n",
			jsonString(f.domain), jsonString(namespace))
	}
	return nil
}

// erlFiles reads the ERL files at path, refusing what LoadPath refuses.
func erlFiles(path string) ([]*erlFile, error) {
	if _, err := LoadPath(path); err != nil {
		return nil, err
	}
	names := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		names = names[:0]
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				names = append(names, filepath.Join(path, e.Name()))
			}
		}
	}
	var files []*erlFile
	for _, name := range names {
		fi, err := os.Stat(name)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		data, err := readBounded(name)
		if err != nil {
			return nil, err
		}
		if !isERL(data) {
			continue
		}
		f, err := parseERL(name, data)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no envoyproxy/ratelimit file", path)
	}
	return files, nil
}

type converter struct {
	w         io.Writer
	file      *erlFile
	namespace string
	// seen names the policy of each set of descriptors written.
	seen map[string]string
}

type convLevel struct {
	key, value string
	notes      []string
}

// descriptors converts ds, the children of the level whose full key is
// parent, at path.
func (c *converter) descriptors(parent string, path []convLevel, ds []erlDescriptor) {
	for i := range ds {
		d := &ds[i]
		full := parent + "." + d.Key
		if d.Value != "" {
			full += "_" + d.Value
		}
		l := convLevel{key: d.Key, value: d.Value}
		switch {
		case strings.Contains(d.Key+d.Value, "*"):
			l.value = ""
			l.notes = append(l.notes, fmt.Sprintf("ERL's %s is a wildcard; this policy counts every value of %s, each apart", jsonString(d.Key+"_"+d.Value), d.Key))
			if d.ShareThreshold {
				l.notes = append(l.notes, "share_threshold: ERL gives every value the wildcard matches one counter; here each value has its own")
			}
		case d.Value == "" && slices.ContainsFunc(ds, func(o erlDescriptor) bool { return o.Key == d.Key && o.Value != "" }):
			l.notes = append(l.notes, fmt.Sprintf("ERL applies the value-specific siblings of %s instead of it; this policy decides their requests too", d.Key))
		}
		if d.DetailedMetric || d.ValueToMetric {
			l.notes = append(l.notes, "detailed_metric and value_to_metric have no equivalent: --top-descriptors reports the hottest values")
		}
		levels := append(path[:len(path):len(path)], l)
		if d.RateLimit != nil {
			c.policy(full, levels, d)
		}
		c.descriptors(full, levels, d.Descriptors)
	}
}

// policy writes the policy of d's rate limit, whose full key is full, or a
// comment when it has no equivalent.
func (c *converter) policy(full string, levels []convLevel, d *erlDescriptor) {
	rl := d.RateLimit
	var notes []string
	for _, l := range levels {
		notes = append(notes, l.notes...)
	}
	skip := ""
	period := erlPeriods[strings.ToUpper(rl.Unit)]
	switch {
	case rl.Unlimited:
		skip = "unlimited: no policy (a policy of these keys without their values would still decide it)"
	case rl.RequestsPerUnit == 0:
		skip = "requests_per_unit 0 denies every request: no equivalent (rate.limit is at least 1)"
	case period == "":
		skip = "unit year (365 days from the epoch): no equivalent (rate.period is at most 720h; a calendar Month is no 30 days)"
	}
	if len(rl.Replaces) > 0 {
		notes = append(notes, "replaces has no equivalent: every matching policy decides")
	}
	if len(d.Metadata) > 0 {
		notes = append(notes, "metadata has no equivalent: a policy's answer carries no metadata of the user's")
	}
	mode := ""
	switch {
	case d.ShadowMode:
		mode, notes = "Shadow", append(notes, "shadow_mode: a Shadow policy answers OK without its figures, where ERL tells them")
	case d.QuotaMode:
		mode, notes = "Soft", append(notes, "quota_mode: a Soft policy allows and marks the request past the limit; ERL denies a request whose every quota is over")
	}
	fmt.Fprintf(c.w, "---\n# ERL %s (%s)\n", full, c.file.name)
	for _, n := range notes {
		fmt.Fprintf(c.w, "# %s\n", n)
	}
	sig := ""
	for _, l := range levels {
		sig += jsonString(l.key) + "=" + jsonString(l.value) + ";"
	}
	if other, ok := c.seen[sig]; ok && skip == "" {
		skip = "its converted descriptors are " + other + "'s: left out (" + other + " decides its requests)"
	}
	if skip != "" {
		fmt.Fprintf(c.w, "# %s\n", skip)
		return
	}
	c.seen[sig] = policyName(full)
	fmt.Fprintf(c.w, "apiVersion: ratelimit.sluice.dev/v1beta1\nkind: RateLimitPolicy\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  domain: %s\n  descriptors:\n",
		policyName(full), jsonString(c.namespace), jsonString(c.file.domain))
	for _, l := range levels {
		fmt.Fprintf(c.w, "    - key: %s\n", jsonString(l.key))
		if l.value != "" {
			fmt.Fprintf(c.w, "      value: %s\n", jsonString(l.value))
		}
	}
	fmt.Fprintf(c.w, "  limit:\n    type: Rate\n    rate: {algorithm: FixedWindow, limit: %d, period: %s}\n", rl.RequestsPerUnit, period)
	if mode != "" {
		fmt.Fprintf(c.w, "  mode: %s\n", mode)
	}
}

var nameUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// policyName is a DNS label from an ERL full key: its letters and digits,
// and a hash of it, so that two keys never share a name.
func policyName(full string) string {
	sum := sha256.Sum256([]byte(full))
	slug := strings.Trim(nameUnsafe.ReplaceAllString(strings.ToLower(full), "-"), "-")
	if len(slug) > 50 {
		slug = strings.TrimRight(slug[:50], "-")
	}
	return "erl-" + slug + "-" + hex.EncodeToString(sum[:3])
}

// jsonString is s as a YAML double-quoted scalar.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
