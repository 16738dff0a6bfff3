package dashboardcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/teststorage"
)

// dashboardFile is the chart's dashboard.
const dashboardFile = "../../charts/sluice/files/grafana-dashboard.json"

// scrapes is how many scrapes TestDashboardExpositions writes, and
// scrapeInterval how far apart they are loaded.
const scrapes = 4

const scrapeInterval = 30 * time.Second

// dashboard is the part of Grafana's dashboard JSON this test reads.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVars are the values of Grafana's variables the queries use.
var grafanaVars = strings.NewReplacer("$__rate_interval", "2m", "${__rate_interval}", "2m")

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s: no panels", dashboardFile)
	}
	return d
}

// TestDashboardParses: every panel has a title and queries, and every
// query parses as PromQL once Grafana's variables are set.
func TestDashboardParses(t *testing.T) {
	d := readDashboard(t)
	for _, p := range d.Panels {
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q: no title or no queries", p.Title)
		}
		for _, q := range p.Targets {
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(q.Expr)); err != nil {
				t.Errorf("panel %q query %s: %v\n%s", p.Title, q.RefID, err, q.Expr)
			}
		}
	}
}

// TestDashboardQueriesReturnSeries loads the limiter's and the operator's
// scrapes (scrapeInterval apart, as instance "limiter" and "operator") into
// a Prometheus TSDB and runs every query of the dashboard at the last
// scrape, failing on one that returns no series (or only NaN: a quantile
// of no observations).
func TestDashboardQueriesReturnSeries(t *testing.T) {
	d := readDashboard(t)
	st, start := loadScrapes(t)
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	at := start.Add((scrapes - 1) * scrapeInterval)
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			expr := grafanaVars.Replace(q.Expr)
			query, err := engine.NewInstantQuery(context.Background(), st, nil, expr, at)
			if err != nil {
				t.Errorf("panel %q query %s: %v", p.Title, q.RefID, err)
				continue
			}
			res := query.Exec(context.Background())
			switch {
			case res.Err != nil:
				t.Errorf("panel %q query %s: %v\n%s", p.Title, q.RefID, res.Err, expr)
			case seriesOf(res) == 0:
				t.Errorf("panel %q query %s returns no series from a real limiter and operator:\n%s", p.Title, q.RefID, expr)
			default:
				t.Logf("panel %q query %s: %s", p.Title, q.RefID, strings.ReplaceAll(res.String(), "\n", "; "))
			}
			query.Close()
		}
	}
}

// loadScrapes loads the limiter's and the operator's scrapes from
// $SLUICE_DASHBOARD_EXPOSITIONS, scrapeInterval apart from start, into a
// Prometheus TSDB.
func loadScrapes(t *testing.T) (*teststorage.TestStorage, time.Time) {
	t.Helper()
	dir := os.Getenv("SLUICE_DASHBOARD_EXPOSITIONS")
	if dir == "" {
		t.Fatal("$SLUICE_DASHBOARD_EXPOSITIONS is not set: make test-dashboard scrapes real limiter and operator processes into it first")
	}
	st := teststorage.New(t)
	start := time.Unix(1_800_000_000, 0)
	app := st.Appender(context.Background())
	loaded := 0
	for scrape := 1; scrape <= scrapes; scrape++ {
		ts := start.Add(time.Duration(scrape-1) * scrapeInterval).UnixMilli()
		for _, job := range []string{"limiter", "operator"} {
			file := filepath.Join(dir, fmt.Sprintf("%s-%d.prom", job, scrape))
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(f)
			f.Close()
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for name, mf := range families {
				for _, m := range mf.GetMetric() {
					for _, s := range samples(name, mf.GetType(), m) {
						lset := labels.NewBuilder(s.labels).Set("job", job).Set("instance", job).Labels()
						if _, err := app.Append(0, lset, ts, s.value); err != nil {
							t.Fatalf("%s: appending %s: %v", file, lset, err)
						}
						loaded++
					}
				}
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if loaded == 0 {
		t.Fatal("the expositions hold no samples")
	}
	return st, start
}

// seriesOf is how many series (or a scalar's one) a result holds, leaving
// out NaN values (a histogram_quantile over no observations).
func seriesOf(res *promql.Result) int {
	switch v := res.Value.(type) {
	case promql.Vector:
		n := 0
		for _, s := range v {
			if !math.IsNaN(s.F) || s.H != nil {
				n++
			}
		}
		return n
	case promql.Matrix:
		return len(v)
	case promql.Scalar:
		return 1
	}
	return 0
}

type sample struct {
	labels labels.Labels
	value  float64
}

// samples are the series of one exposed metric as Prometheus stores a
// scrape of it: a histogram as _bucket (with le), _sum and _count.
func samples(name string, typ dto.MetricType, m *dto.Metric) []sample {
	base := map[string]string{}
	for _, lp := range m.GetLabel() {
		base[lp.GetName()] = lp.GetValue()
	}
	mk := func(metric string, extra map[string]string, v float64) sample {
		l := map[string]string{"__name__": metric}
		for k, val := range base {
			l[k] = val
		}
		for k, val := range extra {
			l[k] = val
		}
		return sample{labels.FromMap(l), v}
	}
	switch typ {
	case dto.MetricType_COUNTER:
		return []sample{mk(name, nil, m.GetCounter().GetValue())}
	case dto.MetricType_GAUGE:
		return []sample{mk(name, nil, m.GetGauge().GetValue())}
	case dto.MetricType_UNTYPED:
		return []sample{mk(name, nil, m.GetUntyped().GetValue())}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := []sample{mk(name+"_sum", nil, h.GetSampleSum()), mk(name+"_count", nil, float64(h.GetSampleCount()))}
		for _, b := range h.GetBucket() {
			out = append(out, mk(name+"_bucket", map[string]string{"le": model.FloatString(b.GetUpperBound()).String()}, float64(b.GetCumulativeCount())))
		}
		return append(out, mk(name+"_bucket", map[string]string{"le": "+Inf"}, float64(h.GetSampleCount())))
	case dto.MetricType_SUMMARY:
		s := m.GetSummary()
		out := []sample{mk(name+"_sum", nil, s.GetSampleSum()), mk(name+"_count", nil, float64(s.GetSampleCount()))}
		for _, q := range s.GetQuantile() {
			out = append(out, mk(name, map[string]string{"quantile": model.FloatString(q.GetQuantile()).String()}, q.GetValue()))
		}
		return out
	}
	return nil
}
