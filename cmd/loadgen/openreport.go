package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// openRun's results by mode and offered rate, for the open-loop table.
type openCell struct {
	mode string
	rate float64
	runs []*Result // one per round, in the order given
	bad  int       // files missing or not open-loop results
}

// readOpenResults reads MODE=FILE arguments into cells, in the order of
// each mode's first appearance and, within a mode, of rate.
func readOpenResults(args []string) ([]*openCell, error) {
	var cells []*openCell
	find := func(mode string, rate float64) *openCell {
		for _, c := range cells {
			if c.mode == mode && c.rate == rate {
				return c
			}
		}
		c := &openCell{mode: mode, rate: rate}
		cells = append(cells, c)
		return c
	}
	for _, a := range args {
		mode, file, ok := strings.Cut(a, "=")
		if !ok || mode == "" || file == "" {
			return nil, fmt.Errorf("%q is not MODE=FILE", a)
		}
		r, err := readResult(file)
		if err != nil || r.Open == nil {
			find(mode, -1).bad++
			continue
		}
		c := find(mode, r.Open.OfferedRate)
		c.runs = append(c.runs, r)
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("no MODE=FILE arguments")
	}
	order := map[string]int{}
	for _, c := range cells {
		if _, ok := order[c.mode]; !ok {
			order[c.mode] = len(order)
		}
	}
	slices.SortStableFunc(cells, func(a, b *openCell) int {
		if d := order[a.mode] - order[b.mode]; d != 0 {
			return d
		}
		return int(a.rate - b.rate)
	})
	return cells, nil
}

func readResult(file string) (*Result, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// median of vs (the lower middle of an even count); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// cpuSplit is r's CPU per decision: the server's own, and of the other
// measured processes (its redis-server).
func cpuSplit(r *Result) (server, others float64, ok bool) {
	c := r.ServerCPU
	if c == nil || c.Error != "" || len(c.Processes) == 0 || r.Decisions == 0 {
		return 0, 0, false
	}
	return c.Processes[0].UsPerDecision, c.UsPerDecision - c.Processes[0].UsPerDecision, true
}

// runOpenReport implements `loadgen open-report [--base MODE] MODE=FILE...`:
// the open-loop table, one row per mode and offered rate, medians over the
// rounds (the n-th file of a mode and rate is round n), each compared with
// the base mode at the same rate in the same round.
func runOpenReport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("open-report", flag.ContinueOnError)
	base := fs.String("base", "noop", "the `mode` each row is compared with, at the same rate and round")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cells, err := readOpenResults(fs.Args())
	if err != nil {
		return fmt.Errorf("open-report: %w", err)
	}
	baseOf := map[float64]*openCell{}
	for _, c := range cells {
		if c.mode == *base {
			baseOf[c.rate] = c
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mode\toffered/s\trounds\tanswered/s\tp50\tp99\tp99.9\tdropped\terrors\tCPU µs/dec\tof it redis\tp99 vs %s\tCPU vs %s\tsend lag p99\t\n", *base, *base)
	for _, c := range cells {
		fmt.Fprintln(tw, openRow(c, baseOf[c.rate]))
	}
	return tw.Flush()
}

// openRow is one row of the open-loop table.
func openRow(c, base *openCell) string {
	if c.rate < 0 {
		return fmt.Sprintf("%s\t-\t%d failed\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t", c.mode, c.bad)
	}
	var p50, p99, p999, rate, cpu, redis, rP99, rCPU, lag []float64
	var dropped, scheduled, errs uint64
	for i, r := range c.runs {
		p50, p99, p999 = append(p50, r.Latency.P50), append(p99, r.Latency.P99), append(p999, r.Latency.P999)
		rate, lag = append(rate, r.DecisionsPerSec), append(lag, r.Open.SendLag.P99)
		dropped, scheduled, errs = dropped+r.Open.Dropped, scheduled+r.Open.Scheduled, errs+r.Errors
		srv, oth, ok := cpuSplit(r)
		if ok {
			cpu, redis = append(cpu, srv+oth), append(redis, oth)
		}
		if base == nil || i >= len(base.runs) {
			continue
		}
		b := base.runs[i]
		if b.Latency.P99 > 0 && r.Decisions > 0 {
			rP99 = append(rP99, r.Latency.P99/b.Latency.P99)
		}
		if bs, bo, bok := cpuSplit(b); ok && bok && bs+bo > 0 {
			rCPU = append(rCPU, (srv+oth)/(bs+bo))
		}
	}
	rounds := strconv.Itoa(len(c.runs))
	if c.bad > 0 {
		rounds += fmt.Sprintf(" (%d failed)", c.bad)
	}
	drop := group(dropped)
	if dropped > 0 && scheduled > 0 {
		drop += fmt.Sprintf(" (%.1f%%)", 100*float64(dropped)/float64(scheduled))
	}
	opt := func(vs []float64, f func(float64) string) string {
		if len(vs) == 0 {
			return "-"
		}
		return f(median(vs))
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	ratio := func(v float64) string { return fmt.Sprintf("%.2fx", v) }
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", c.mode, groupf(c.rate), rounds,
		groupf(median(rate)), fmtUs(median(p50)), fmtUs(median(p99)), fmtUs(median(p999)), drop, group(errs),
		opt(cpu, num), opt(redis, num), opt(rP99, ratio), opt(rCPU, ratio), fmtUs(median(lag)))
}

// held reports whether r held its offered rate: every scheduled call
// answered in time (none dropped, no error) with p99 under p99Max.
func held(r *Result, p99Max time.Duration) (bool, string) {
	switch {
	case r.Open == nil:
		return false, "not an open-loop result"
	case r.Decisions == 0:
		return false, "nothing answered"
	case r.Open.Dropped > 0:
		return false, fmt.Sprintf("%d of %d dropped", r.Open.Dropped, r.Open.Scheduled)
	case r.Errors > 0:
		return false, fmt.Sprintf("%d errors", r.Errors)
	case r.Latency.P99 >= float64(p99Max.Microseconds()):
		return false, fmt.Sprintf("p99 %s, not under %s", fmtUs(r.Latency.P99), p99Max)
	}
	return true, fmt.Sprintf("p99 %s, nothing dropped", fmtUs(r.Latency.P99))
}

// runHeld implements `loadgen held [--p99-max D] FILE`: exit status 0 when
// the open-loop result in FILE held its rate (see held), 1 when not.
func runHeld(args []string, stdout io.Writer) (bool, error) {
	fs := flag.NewFlagSet("held", flag.ContinueOnError)
	p99Max := fs.Duration("p99-max", 5*time.Millisecond, "the p99 a rate is held under")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if fs.NArg() != 1 {
		return false, fmt.Errorf("held: want one FILE, got %d arguments", fs.NArg())
	}
	if *p99Max <= 0 {
		return false, fmt.Errorf("held: --p99-max %s: want more than 0", *p99Max)
	}
	r, err := readResult(fs.Arg(0))
	if err != nil {
		return false, fmt.Errorf("held: %w", err)
	}
	ok, why := held(r, *p99Max)
	verdict := "held"
	if !ok {
		verdict = "not held"
	}
	rate := "?"
	if r.Open != nil {
		rate = groupf(r.Open.OfferedRate)
	}
	fmt.Fprintf(stdout, "%s/s: %s (%s)\n", rate, verdict, why)
	return ok, nil
}
