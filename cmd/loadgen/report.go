package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// fmtUs prints a duration given in microseconds with three or so significant
// digits.
func fmtUs(us float64) string {
	switch {
	case us <= 0:
		return "0"
	case us < 10:
		return strconv.FormatFloat(us, 'f', 2, 64) + "µs"
	case us < 1000:
		return strconv.FormatFloat(us, 'f', 0, 64) + "µs"
	case us < 1e6:
		return strconv.FormatFloat(us/1e3, 'f', 2, 64) + "ms"
	default:
		return strconv.FormatFloat(us/1e6, 'f', 2, 64) + "s"
	}
}

// group prints n with thousands separators.
func group(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func groupf(f float64) string {
	if f < 0 {
		return "-" + group(uint64(-f+0.5))
	}
	return group(uint64(f + 0.5))
}

// printResult writes the human-readable block.
func printResult(w io.Writer, label string, r *Result) {
	if label != "" {
		fmt.Fprintf(w, "== %s\n", label)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "target\t%s, domain %q, descriptor %q\n", r.Target, r.Domain, r.Descriptor)
	if o := r.Open; o != nil {
		fmt.Fprintf(tw, "load\topen loop, %s calls/s offered over %d connections (%s), %d keys (%s), hits %d\n",
			groupf(o.OfferedRate), r.Conns, r.Protocol, r.Keys, r.KeyOrder, max(r.Hits, 1))
	} else {
		fmt.Fprintf(tw, "load\tconcurrency %d over %d connections (%s), %d keys (%s), hits %d\n",
			r.Concurrency, r.Conns, r.Protocol, r.Keys, r.KeyOrder, max(r.Hits, 1))
	}
	fmt.Fprintf(tw, "measured\t%.2fs after %.3gs warm-up, stopped by %s; %s calls sent in all\n",
		r.MeasuredSeconds, r.WarmupSeconds, r.StoppedBy, group(uint64(r.Sent)))
	fmt.Fprintf(tw, "decisions/s\t%s\n", groupf(r.DecisionsPerSec))
	if len(r.Backends) > 0 {
		var parts []string
		for _, b := range slices.Sorted(maps.Keys(r.Backends)) {
			parts = append(parts, fmt.Sprintf("%s %s", b, group(r.Backends[b])))
		}
		fmt.Fprintf(tw, "by server\t%s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(tw, "decisions\t%s (OK %s, OVER_LIMIT %s, UNKNOWN %s)\n",
		group(r.Decisions), group(r.OK), group(r.OverLimit), group(r.Unknown))
	errs := group(r.Errors)
	if r.Errors > 0 {
		var parts []string
		for _, c := range sortedCodes(r.ErrorsByCode) {
			parts = append(parts, fmt.Sprintf("%s %s", c, group(r.ErrorsByCode[c])))
		}
		errs += " (" + strings.Join(parts, ", ") + "); first: " + r.FirstError
	}
	if r.Unfinished > 0 {
		errs += fmt.Sprintf("; %d calls unanswered at the end", r.Unfinished)
	}
	fmt.Fprintf(tw, "errors\t%s\n", errs)
	if o := r.Open; o != nil {
		fmt.Fprintf(tw, "open loop\t%s scheduled in the measured interval: %s answered in time, %s dropped (%s at --max-in-flight %d, %s unanswered %gms after their start)\n",
			group(o.Scheduled), group(r.Decisions), group(o.Dropped), group(o.DroppedCap), o.MaxInFlight, group(o.DroppedLate), o.DropAfterMs)
		fmt.Fprintf(tw, "send lag\tp50 %s  p99 %s  max %s  (the load generator's own delay after each scheduled start, part of the latency)\n",
			fmtUs(o.SendLag.P50), fmtUs(o.SendLag.P99), fmtUs(o.SendLag.Max))
	}
	l := r.Latency
	if r.Open != nil {
		fmt.Fprintf(tw, "latency\tfrom each call's scheduled start, answered calls:\n")
	}
	fmt.Fprintf(tw, "latency\tp50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (mean %s)\n",
		fmtUs(l.P50), fmtUs(l.P90), fmtUs(l.P99), fmtUs(l.P999), fmtUs(l.Max), fmtUs(l.Mean))
	switch c := r.ServerCPU; {
	case c == nil:
		fmt.Fprintf(tw, "server CPU\tnot measured (pass --server-pid or --metrics-url)\n")
	case c.Error != "":
		fmt.Fprintf(tw, "server CPU\tunavailable: %s\n", c.Error)
	default:
		fmt.Fprintf(tw, "server CPU\t%.2f µs/decision, %.2f cores\n", c.UsPerDecision, c.Cores)
		if len(c.Processes) > 1 {
			for _, p := range c.Processes {
				fmt.Fprintf(tw, "  %s\t%.2f µs/decision, %.2f cores\n", p.Name, p.UsPerDecision, p.Cores)
			}
		}
	}
	fmt.Fprintf(tw, "loadgen CPU\t%.2f cores (shares the machine with the server)\n", r.LoadgenCores)
	if r.MachineCores >= 0 {
		note := ""
		if r.OtherCores >= 0.1 {
			note = ": other processes competed for the cores, the figures are noisy"
		}
		fmt.Fprintf(tw, "machine CPU\t%.2f cores busy in all, %.2f of them by other processes%s\n", r.MachineCores, r.OtherCores, note)
	}
	_ = tw.Flush()
}

// runReport implements `loadgen report [--json] LABEL=FILE...`: a table of
// several runs' JSON results, each compared with the first (the baseline).
func runReport(args []string, stdout io.Writer) error {
	type row struct {
		label string
		r     *Result
		err   string
	}
	var rows []row
	for _, a := range args {
		label, file, ok := strings.Cut(a, "=")
		if !ok || label == "" || file == "" {
			return fmt.Errorf("report: %q is not LABEL=FILE", a)
		}
		data, err := os.ReadFile(file)
		if err != nil || len(data) == 0 {
			rows = append(rows, row{label: label, err: "no result"})
			continue
		}
		var r Result
		if err := json.Unmarshal(data, &r); err != nil {
			rows = append(rows, row{label: label, err: "bad result: " + err.Error()})
			continue
		}
		rows = append(rows, row{label: label, r: &r})
	}
	if len(rows) == 0 {
		return fmt.Errorf("report: no LABEL=FILE arguments")
	}
	base := rows[0].r
	cpuOf := func(r *Result) (server, others float64, ok bool) {
		c := r.ServerCPU
		if c == nil || c.Error != "" || len(c.Processes) == 0 {
			return 0, 0, false
		}
		return c.Processes[0].UsPerDecision, c.UsPerDecision - c.Processes[0].UsPerDecision, true
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	b := rows[0].label
	fmt.Fprintf(tw, "store\tdecisions/s\tp50\tp99\tp99.9\tserver µs/dec\tother µs/dec\ttotal µs/dec\tdecisions/s vs %s\tserver µs/dec vs %s\ttotal µs/dec vs %s\terrors\tother load\t\n", b, b, b)
	for _, rw := range rows {
		if rw.r == nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", rw.label, rw.err)
			continue
		}
		r := rw.r
		srv, oth, ok := cpuOf(r)
		srvS, othS, totS := "-", "-", "-"
		if ok {
			srvS = strconv.FormatFloat(srv, 'f', 2, 64)
			totS = strconv.FormatFloat(srv+oth, 'f', 2, 64)
			if len(r.ServerCPU.Processes) > 1 {
				othS = strconv.FormatFloat(oth, 'f', 2, 64)
			}
		}
		tput, srvRatio, totRatio := "-", "-", "-"
		if base != nil && base.DecisionsPerSec > 0 {
			tput = fmt.Sprintf("%.2fx", r.DecisionsPerSec/base.DecisionsPerSec)
		}
		if base != nil {
			if bs, bo, bok := cpuOf(base); ok && bok && bs > 0 {
				srvRatio = fmt.Sprintf("%.2fx", srv/bs)
				totRatio = fmt.Sprintf("%.2fx", (srv+oth)/(bs+bo))
			}
		}
		other := "-"
		if r.OtherCores >= 0 {
			other = fmt.Sprintf("%.2f cores", r.OtherCores)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rw.label, groupf(r.DecisionsPerSec),
			fmtUs(r.Latency.P50), fmtUs(r.Latency.P99), fmtUs(r.Latency.P999), srvS, othS, totS, tput, srvRatio, totRatio, group(r.Errors), other)
	}
	return tw.Flush()
}

// runRounds implements `loadgen rounds LABEL=FILE...`: the results of
// several interleaved rounds, each round's first file its baseline (the
// label of the very first argument), summarized per label over the rounds:
// the range (least–most) of decisions/s and of total CPU per decision
// relative to the same round's baseline, and of the absolute figures.
// Comparing each run with its own round's baseline cancels much of what
// other load on a shared machine does to the figures.
func runRounds(args []string, stdout io.Writer) error {
	type span struct{ lo, hi float64 }
	add := func(s *span, v float64, first bool) {
		if first || v < s.lo {
			s.lo = v
		}
		if first || v > s.hi {
			s.hi = v
		}
	}
	type agg struct {
		n                    int
		tput, us, p99, rTput span
		rCPU                 span
		nCPU, nRatio         int
		missing              int
	}
	var order []string
	aggs := map[string]*agg{}
	var baseLabel string
	var base *Result
	for _, a := range args {
		label, file, ok := strings.Cut(a, "=")
		if !ok || label == "" || file == "" {
			return fmt.Errorf("rounds: %q is not LABEL=FILE", a)
		}
		if baseLabel == "" {
			baseLabel = label
		}
		g := aggs[label]
		if g == nil {
			g = &agg{}
			aggs[label] = g
			order = append(order, label)
		}
		var r Result
		data, err := os.ReadFile(file)
		if err == nil && len(data) > 0 {
			err = json.Unmarshal(data, &r)
		}
		if err != nil || len(data) == 0 {
			g.missing++
			if label == baseLabel {
				base = nil
			}
			continue
		}
		if label == baseLabel {
			base = &r
		}
		first := g.n == 0
		g.n++
		add(&g.tput, r.DecisionsPerSec, first)
		add(&g.p99, r.Latency.P99, first)
		us, cpuOK := totalUs(&r)
		if cpuOK {
			add(&g.us, us, g.nCPU == 0)
			g.nCPU++
		}
		if base != nil && base.DecisionsPerSec > 0 {
			bus, bok := totalUs(base)
			add(&g.rTput, r.DecisionsPerSec/base.DecisionsPerSec, g.nRatio == 0)
			if cpuOK && bok && bus > 0 {
				add(&g.rCPU, us/bus, g.nRatio == 0)
			} else {
				g.rCPU = span{-1, -1}
			}
			g.nRatio++
		}
	}
	if len(order) == 0 {
		return fmt.Errorf("rounds: no LABEL=FILE arguments")
	}
	rng := func(s span, f string) string {
		if s.lo < 0 {
			return "-"
		}
		return fmt.Sprintf(f+"–"+f, s.lo, s.hi)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "store\trounds\tdecisions/s\tp99 ms\ttotal µs/dec\tdecisions/s vs %s\ttotal µs/dec vs %s\t\n", baseLabel, baseLabel)
	for _, label := range order {
		g := aggs[label]
		rounds := strconv.Itoa(g.n)
		if g.missing > 0 {
			rounds += fmt.Sprintf(" (%d failed)", g.missing)
		}
		if g.n == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t\n", label, rounds)
			continue
		}
		us, rt, rc := "-", "-", "-"
		if g.nCPU > 0 {
			us = rng(g.us, "%.1f")
		}
		if g.nRatio > 0 {
			rt, rc = rng(g.rTput, "%.2f"), rng(g.rCPU, "%.2f")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s–%s\t%s\t%s\t%s\t%s\t\n", label, rounds, groupf(g.tput.lo), groupf(g.tput.hi),
			rng(span{g.p99.lo / 1e3, g.p99.hi / 1e3}, "%.2f"), us, rt, rc)
	}
	return tw.Flush()
}

// totalUs is r's CPU per decision of all the measured processes (the
// server and, for Redis, its redis-server), from /proc.
func totalUs(r *Result) (float64, bool) {
	c := r.ServerCPU
	if c == nil || c.Error != "" {
		return 0, false
	}
	return c.UsPerDecision, true
}
