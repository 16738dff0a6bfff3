package dashboardcheck

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TestDashboardPicture draws every panel of the dashboard as a line plot
// of its queries' real results (range queries over the loaded scrapes,
// the same engine and data as TestDashboardQueriesReturnSeries) into the
// PNG $SLUICE_DASHBOARD_PICTURE names, with gonum/plot: the picture of the
// manual (make dashboard-picture). It is not Grafana's rendering, which is
// AGPL and not used here: the panels' data, not their look.
func TestDashboardPicture(t *testing.T) {
	out := os.Getenv("SLUICE_DASHBOARD_PICTURE")
	if out == "" {
		t.Skip("$SLUICE_DASHBOARD_PICTURE is not set: make dashboard-picture sets it")
	}
	d := readDashboard(t)
	st, start := loadScrapes(t)
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	const cols = 3
	rows := (len(d.Panels) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	from, to := start.Add(scrapeInterval), start.Add((scrapes-1)*scrapeInterval)
	for i, p := range d.Panels {
		pl := plot.New()
		pl.Title.Text = p.Title
		pl.X.Label.Text = "seconds"
		pl.Legend.Top = true
		pl.Legend.TextStyle.Font.Size = vg.Points(7)
		var lines []any
		for _, q := range p.Targets {
			query, err := engine.NewRangeQuery(context.Background(), st, nil, grafanaVars.Replace(q.Expr), from, to, scrapeInterval/2)
			if err != nil {
				t.Fatalf("panel %q: %v", p.Title, err)
			}
			res := query.Exec(context.Background())
			if res.Err != nil {
				t.Fatalf("panel %q: %v", p.Title, res.Err)
			}
			m, _ := res.Value.(promql.Matrix)
			for _, series := range m {
				var xys plotter.XYs
				for _, pt := range series.Floats {
					if !math.IsNaN(pt.F) && !math.IsInf(pt.F, 0) {
						xys = append(xys, plotter.XY{X: float64(pt.T-from.UnixMilli()) / 1000, Y: pt.F})
					}
				}
				if len(xys) > 0 && len(lines) < 16 {
					lines = append(lines, q.RefID+" "+legend(series.Metric.String()), xys)
				}
			}
			query.Close()
		}
		if len(lines) == 0 {
			t.Errorf("panel %q: nothing to draw", p.Title)
			continue
		}
		if err := plotutil.AddLinePoints(pl, lines...); err != nil {
			t.Fatal(err)
		}
		plots[i/cols][i%cols] = pl
	}
	img := vgimg.New(vg.Points(float64(cols)*420), vg.Points(float64(rows)*300))
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(8), PadY: vg.Points(8)}, dc)
	for r := range plots {
		for c, pl := range plots[r] {
			if pl != nil {
				pl.Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// legend shortens a series' labels for a plot's legend.
func legend(labels string) string {
	s := strings.NewReplacer("{", "", "}", "", `"`, "", "policy=", "", "result=", "").Replace(labels)
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}
