package erlcompat_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-dev/sluice/limiter/compiled"
	"github.com/sluice-dev/sluice/limiter/config"
	"github.com/sluice-dev/sluice/limiter/service"
	"github.com/sluice-dev/sluice/limiter/store/memory"
)

// convertDiffers names the cases whose converted policies answer
// differently, and why; limiter convert-erl's comments say so in its
// output (TestConvert checks that they do).
var convertDiffers = map[string]string{
	"a value beats the key alone": "every matching policy decides: the key-only policy counts /login too",
	"nested descriptors, a limit only at the last entry, no deeper than the configuration": "a policy matches among other entries",
	"wildcard values: by prefix, the first in file order, each value its own counter":      "a wildcard becomes every value",
	"share_threshold: every value the wildcard matches shares one counter":                 "a wildcard becomes every value, each its own counter",
	"unlimited": "an unlimited limit has no policy",
	"shadow_mode: over the limit is OK, with the limit's figures":                                 "a Shadow policy tells no figures",
	"quota_mode: within the quota, OK with the quota's figures":                                   "a Soft policy",
	"replaces: a matched limit drops the limits it names, whatever the order":                     "replaces has no equivalent",
	"requests_per_unit 0 denies every hit":                                                        "no policy denies everything",
	"every unit, case-insensitive: windows aligned to the epoch (a month is 30 days, a year 365)": "a year has no policy",
	"hits_addend: the request's, a descriptor's own (0 checks only), denied hits count":           "a FixedWindow does not count denied hits",
	"a request's own limit (the descriptor's limit field) wins, matched or not":                   "a request's own limit is ignored unless the policy opts in (requestOverride)",
}

// TestConvert converts every case of the table with limiter convert-erl's
// function and loads the result as a policy file; the cases it converts
// exactly answer the table's requests with the same codes, on the ERL file
// and on its policies, and the others carry a comment saying what differs.
func TestConvert(t *testing.T) {
	for i, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			domain := caseDomain(i, 0)
			erlPath := filepath.Join(dir, "erl.yaml")
			if err := os.WriteFile(erlPath, []byte(strings.ReplaceAll(c.Config, "DOMAIN", domain)), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := config.ConvertERL(erlPath, "converted", &out); err != nil {
				t.Fatalf("ConvertERL: %v", err)
			}
			converted, err := config.Parse("converted", out.Bytes())
			if err != nil {
				t.Fatalf("the converted policies do not load: %v\n%s", err, out.String())
			}
			original, err := config.LoadPath(erlPath)
			if err != nil {
				t.Fatal(err)
			}
			why, differs := convertDiffers[c.Name]
			if differs {
				if !strings.Contains(strings.SplitN(out.String(), "---", 2)[1], "\n# ") && !strings.Contains(why, "denied hits") {
					t.Errorf("the conversion differs (%s) but says nothing of it:\n%s", why, out.String())
				}
				return
			}
			erl, sluice := newService(t, original), newService(t, converted)
			for j, st := range c.Steps {
				d := domain
				if st.Domain != "" {
					d = st.Domain
				}
				want, got := decide(t, erl, d, st), decide(t, sluice, d, st)
				if want != got {
					t.Fatalf("step %d: the ERL file answers %s, its converted policies %s\n%s", j, want, got, out.String())
				}
			}
		})
	}
}

func newService(t *testing.T, snap *compiled.Snapshot) *service.Service {
	m := memory.New(memory.Options{})
	t.Cleanup(func() { _ = m.Close() })
	svc := service.New(m, service.Options{})
	svc.Swap(snap)
	return svc
}

// decide sends st to svc and says its overall and descriptors' codes.
func decide(t *testing.T, svc *service.Service, domain string, st Step) string {
	t.Helper()
	req := &service.Request{Domain: domain, HitsAddend: uint64(st.Hits)}
	for _, d := range st.Descriptors {
		req.Descriptors = append(req.Descriptors, toService(d))
	}
	resp, err := svc.Decide(context.Background(), req)
	if err != nil {
		return "error " + err.Error()
	}
	s := fmt.Sprintf("over=%v", resp.OverLimit)
	for _, dec := range resp.Decisions {
		s += fmt.Sprintf(" [over=%v]", dec.OverLimit)
	}
	return s
}

func toService(d *ratelimitv3.RateLimitDescriptor) service.Descriptor {
	var sd service.Descriptor
	for _, e := range d.GetEntries() {
		sd.Entries = append(sd.Entries, compiled.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	if h := d.GetHitsAddend(); h != nil {
		sd.HitsAddend, sd.HasHitsAddend = h.GetValue(), true
	}
	if o := d.GetLimit(); o != nil {
		sd.LimitOverride, sd.Override = true, compiled.UnitRate{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: int32(o.GetUnit())}
	}
	return sd
}
