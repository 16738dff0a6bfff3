// Command loadgen is Sluice's benchmark load generator: it sends Envoy RLS v3
// ShouldRateLimit calls to a rate-limit server on this machine and prints
// decisions per second, latency percentiles, and the server's CPU per
// decision. It also serves a do-nothing RLS server for the baseline.
//
//	loadgen --addr 127.0.0.1:8081 --concurrency 64 --keys 10000 --duration 10s \
//	        --domain payments-api --descriptor 'user_id=%d,path=/v1/charges' \
//	        --server-pid 1234              # or --metrics-url http://127.0.0.1:8082/metrics
//	loadgen --serve-noop 127.0.0.1:8081 --noop-metrics-addr 127.0.0.1:8080
//	loadgen --probe --addr 127.0.0.1:8081  # one call; exit 0 when answered
//	loadgen report noop=a.json memory=b.json redis=c.json
//	loadgen rounds noop=n1.json redis=r1.json noop=n2.json redis=r2.json
//	loadgen --rate 10000 --addr 127.0.0.1:8081 ...  # open loop: calls on a schedule
//	loadgen open-report noop=n.json memory=m.json   # the open-loop table
//	loadgen held --p99-max 5ms m.json              # exit 0: the rate was held
//
// Targets must be loopback addresses unless --allow-remote is given: by
// default load is never sent off this machine. With it, --addr may name any
// host, a list of servers (host:port,host:port: round robin over them) or
// dns:///name:port, such as a fleet's headless Service
// (<fleet>-limiter-headless.<namespace>.svc:8081) from a pod, whose every
// ready limiter gets its share; results then count answers per server.
// A run stops by itself after --warmup + --duration, or after --max-requests
// calls, whichever comes first.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	strictLookups(net.DefaultResolver) // the resolver of dns:/// targets
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if code, ok := runSubcommand(args, stdout, stderr); ok {
		return code
	}
	fs, o := newFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadgen: unexpected arguments %q\n", fs.Args())
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := checkLoopFlags(fs, o.cfg.Rate); err != nil {
		return fail(err)
	}
	if o.noopWait != 0 && o.serveNoop == "" {
		return fail(fmt.Errorf("--noop-wait %s: only with --serve-noop", o.noopWait))
	}
	if o.serveNoop != "" {
		return runNoop(ctx, o.serveNoop, o.noopMetrics, o.noopWait, o.serveFor, stdout, stderr)
	}
	if err := o.finish(); err != nil {
		return fail(err)
	}
	if o.probe {
		return runProbe(ctx, o.cfg, stdout, stderr)
	}
	if err := o.cpuSources(); err != nil {
		return fail(err)
	}
	// Fail before sending anything if the CPU source does not answer.
	if _, err := readCPU(ctx, o.cfg.CPU); err != nil {
		return fail(fmt.Errorf("reading server CPU: %w", err))
	}

	res, err := Run(ctx, o.cfg)
	if err != nil {
		return fail(err)
	}
	if err := o.writeResult(stdout, res); err != nil {
		return fail(err)
	}
	if res.Decisions == 0 {
		fmt.Fprintln(stderr, "loadgen: no decision was answered in the measured interval")
		return 1
	}
	return 0
}

// options are the command line's settings beyond Config.
type options struct {
	cfg         Config
	hits        uint
	serverPIDs  string
	metricsURL  string
	asJSON      bool
	jsonFile    string
	label       string
	keyOrder    string
	probe       bool
	serveNoop   string
	noopMetrics string
	serveFor    time.Duration
	noopWait    time.Duration
}

// newFlagSet defines loadgen's flags into the options it returns.
func newFlagSet(stderr io.Writer) (*flag.FlagSet, *options) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	cfg := &o.cfg
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8081", "RLS gRPC `target`: host:port, host:port,host:port (round robin), or dns:///name:port (round robin over its addresses); loopback only without --allow-remote")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "let --addr and --metrics-url be off this machine (a Service, from a pod); without it they must be loopback addresses")
	fs.IntVar(&cfg.Conns, "conns", 4, "gRPC connections; the concurrent calls are spread across them")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "closed loop: concurrent in-flight calls, each sending the next when answered")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: start calls at this many per second on a fixed schedule whether or not answers came back, latency counted from each call's scheduled start (0: closed loop, --concurrency)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", 1000, "with --rate: a call due while this many are in flight is dropped, not sent")
	fs.DurationVar(&cfg.DropAfter, "drop-after", time.Second, "with --rate: a call unanswered this long after its scheduled start is dropped (cancelled)")
	fs.StringVar(&cfg.Protocol, "protocol", protoRLS, "what the server speaks: rls (Envoy RLS v3 ShouldRateLimit) or gubernator (gubernator V1 GetRateLimits, one rate limit per descriptor, limit 1e9/s)")
	fs.IntVar(&cfg.Keys, "keys", 10000, "distinct key indexes substituted for %d in --descriptor")
	fs.StringVar(&o.keyOrder, "key-order", "cycle", "cycle through the keys in order, or pick them at random: cycle|random")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured interval")
	fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "load sent before the measured interval, not counted")
	fs.StringVar(&cfg.Domain, "domain", "payments-api", "rate limit domain")
	fs.StringVar(&cfg.Descriptor, "descriptor", "user_id=%d,path=/v1/charges",
		"descriptor `template`: entries key=value separated by ',', descriptors by ';'; %d is the key index")
	fs.UintVar(&o.hits, "hits", 1, "hits_addend of each call (0 leaves it unset)")
	fs.Int64Var(&cfg.MaxRequests, "max-requests", 100_000_000, "stop after sending this many calls, warm-up included")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "time to wait for the server to answer the first call, and for calls in flight at the end")
	fs.StringVar(&o.metricsURL, "metrics-url", "", "server's Prometheus `URL`, to read process_cpu_seconds_total before and after (loopback only without --allow-remote)")
	fs.StringVar(&o.serverPIDs, "server-pid", "", "server process `id`s, comma-separated, whose CPU (utime+stime in /proc/PID/stat) is measured; the first is the server, the rest (such as redis-server) are reported beside it")
	fs.BoolVar(&o.asJSON, "json", false, "print the result as JSON instead of text")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the result as JSON to this `file`")
	fs.StringVar(&o.label, "label", "", "heading of the text result")
	fs.BoolVar(&o.probe, "probe", false, "send one call to --addr and exit 0 if it is answered, 1 if not (a readiness check)")
	fs.StringVar(&o.serveNoop, "serve-noop", "", "run a do-nothing RLS server on this `address` (always OK) instead of sending load")
	fs.StringVar(&o.noopMetrics, "noop-metrics-addr", "", "with --serve-noop: serve /metrics and /healthz on this `address`")
	fs.DurationVar(&o.noopWait, "noop-wait", 0, "with --serve-noop: wait this long before answering each call, doing nothing (a stand-in for a store's round trip)")
	fs.DurationVar(&o.serveFor, "serve-for", 0, "with --serve-noop: exit after this long (0: until SIGINT or SIGTERM)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  loadgen [flags]            send load and print the result\n"+
			"  loadgen --serve-noop ADDR  serve a do-nothing RLS server\n"+
			"  loadgen --probe            one call, exit status tells whether it was answered\n"+
			"  loadgen report LABEL=FILE...  compare --json-file results with the first\n"+
			"  loadgen rounds LABEL=FILE...  ranges over interleaved rounds, each run against its round's first\n"+
			"  loadgen open-report [--base MODE] MODE=FILE...  the open-loop table (--rate results), by mode and rate\n"+
			"  loadgen held [--p99-max 5ms] FILE  exit 0 if an open-loop result held its rate (p99 under, nothing dropped)\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, o
}

// finish checks --hits and --key-order and puts them into cfg.
func (o *options) finish() error {
	if o.hits > 1_000_000_000 {
		return fmt.Errorf("--hits %d: at most 1000000000", o.hits)
	}
	o.cfg.Hits = uint32(o.hits)
	switch o.keyOrder {
	case "cycle":
	case "random":
		o.cfg.Random = true
	default:
		return fmt.Errorf("--key-order %q: want cycle or random", o.keyOrder)
	}
	return nil
}

// cpuSources reads --metrics-url or --server-pid into cfg.CPU.
func (o *options) cpuSources() error {
	if o.metricsURL != "" && o.serverPIDs != "" {
		return fmt.Errorf("--metrics-url and --server-pid both measure the server's CPU: pass one")
	}
	if o.metricsURL != "" {
		src, err := metricsSource(o.metricsURL, o.cfg.AllowRemote)
		if err != nil {
			return err
		}
		o.cfg.CPU = append(o.cfg.CPU, src)
	}
	if o.serverPIDs == "" {
		return nil
	}
	for _, s := range strings.Split(o.serverPIDs, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--server-pid %q: not a process id", s)
		}
		src, err := pidSource(pid)
		if err != nil {
			return err
		}
		o.cfg.CPU = append(o.cfg.CPU, src)
	}
	return nil
}

// writeResult writes res to --json-file, and as JSON or text to stdout.
func (o *options) writeResult(stdout io.Writer, res *Result) error {
	if o.jsonFile != "" {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(o.jsonFile, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printResult(stdout, o.label, res)
	return nil
}

func runNoop(ctx context.Context, addr, metricsAddr string, wait, serveFor time.Duration, stdout, stderr io.Writer) int {
	s, err := startNoop(addr, metricsAddr, wait)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	fmt.Fprintf(stdout, "noop RLS server listening on %s", s.GRPCAddr())
	if m := s.MetricsAddr(); m != "" {
		fmt.Fprintf(stdout, ", metrics on http://%s/metrics", m)
	}
	fmt.Fprintln(stdout)
	var timeout <-chan time.Time
	if serveFor > 0 {
		t := time.NewTimer(serveFor)
		defer t.Stop()
		timeout = t.C
	}
	code := 0
	select {
	case <-ctx.Done():
	case <-timeout:
	case err := <-s.Err():
		fmt.Fprintln(stderr, "loadgen: noop server:", err)
		code = 1
	}
	s.Stop()
	return code
}

func runProbe(ctx context.Context, cfg Config, stdout, stderr io.Writer) int {
	tmpl, err := parseTemplate(cfg.Descriptor)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	conns, tgt, err := dial(cfg.Addr, cfg.AllowRemote, 1)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	defer closeAll(conns)
	newCall, err := newCallerFunc(cfg.Protocol, tmpl, cfg.Domain, cfg.Hits)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	if err := preflight(ctx, conns, tgt.name, newCall, cfg.Timeout); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s answered\n", tgt.name)
	return 0
}

// checkLoopFlags refuses flags of the other loop: --concurrency with
// --rate (the schedule sets the load), --max-in-flight and --drop-after
// without it.
func checkLoopFlags(fs *flag.FlagSet, rate float64) error {
	if rate < 0 {
		return nil // validate names --rate
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case err != nil:
		case f.Name == "concurrency" && rate != 0:
			err = fmt.Errorf("--concurrency %s: closed loop only; with --rate the schedule sets the load (bound it with --max-in-flight)", f.Value)
		case (f.Name == "max-in-flight" || f.Name == "drop-after") && rate == 0:
			err = fmt.Errorf("--%s %s: only with --rate (the open loop)", f.Name, f.Value)
		}
	})
	return err
}

// runSubcommand runs report, rounds, open-report or held when args name
// one, and returns its exit status and true; false when they do not.
func runSubcommand(args []string, stdout, stderr io.Writer) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	var err error
	switch args[0] {
	case "report":
		err = runReport(args[1:], stdout)
	case "rounds":
		err = runRounds(args[1:], stdout)
	case "open-report":
		err = runOpenReport(args[1:], stdout)
	case "held":
		var ok bool
		if ok, err = runHeld(args[1:], stdout); err == nil && !ok {
			return 1, true
		}
	default:
		return 0, false
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2, true
	}
	return 0, true
}
