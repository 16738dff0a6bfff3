package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// runOpenAgainst runs an open loop against addr with cfg's open-loop fields.
func runOpenAgainst(t *testing.T, addr string, cfg Config) *Result {
	t.Helper()
	cfg.Addr, cfg.Conns, cfg.Keys = addr, 2, 10
	cfg.Domain, cfg.Descriptor, cfg.Hits = "bench", "user_id=%d", 1
	cfg.MaxRequests, cfg.Timeout = 1_000_000, 10*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Open == nil {
		t.Fatal("no open-loop figures in the result")
	}
	return res
}

// TestOpenLoopCountsFromSchedule: against a server holding each call
// 20ms, latency counts from each call's scheduled start, so its mean is
// at least the wait (a lower bound: a loaded machine only adds), every
// scheduled call is answered, dropped or failed, and the schedule does
// not wait for answers (more calls were in flight than one).
func TestOpenLoopCountsFromSchedule(t *testing.T) {
	const wait = 20 * time.Millisecond
	s, err := startNoop("127.0.0.1:0", "", wait)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	res := runOpenAgainst(t, s.GRPCAddr(), Config{
		Rate: 200, MaxInFlight: 1000, DropAfter: 30 * time.Second,
		Duration: 500 * time.Millisecond, Warmup: 0,
	})
	o := res.Open
	if res.Decisions == 0 || res.Errors != 0 {
		t.Fatalf("decisions %d errors %d (%s)", res.Decisions, res.Errors, res.FirstError)
	}
	if o.Scheduled != res.Decisions+o.Dropped+res.Errors {
		t.Errorf("scheduled %d, want answered %d + dropped %d + errors %d", o.Scheduled, res.Decisions, o.Dropped, res.Errors)
	}
	if floor := float64(wait.Microseconds()); res.Latency.Mean < floor {
		t.Errorf("mean latency %.0fµs, want at least the wait, %.0fµs", res.Latency.Mean, floor)
	}
	// 200/s for 0.5s schedules about 100 calls; closed to one call at a
	// time, 20ms each, no more than 25 would have been sent.
	if res.Sent <= 25 {
		t.Errorf("%d calls sent in 0.5s at 200/s against a 20ms server: the schedule waited for answers", res.Sent)
	}
}

// TestOpenLoopDrops: with one call allowed in flight against a server
// holding each 50ms, calls due meanwhile are dropped at the cap and
// counted; with --drop-after shorter than the wait, answers are late and
// counted dropped.
func TestOpenLoopDrops(t *testing.T) {
	s, err := startNoop("127.0.0.1:0", "", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	res := runOpenAgainst(t, s.GRPCAddr(), Config{
		Rate: 200, MaxInFlight: 1, DropAfter: 30 * time.Second, Duration: 500 * time.Millisecond,
	})
	if res.Open.DroppedCap == 0 || res.Open.Dropped != res.Open.DroppedCap+res.Open.DroppedLate {
		t.Errorf("at cap 1: dropped %d (at cap %d, late %d), want drops at the cap", res.Open.Dropped, res.Open.DroppedCap, res.Open.DroppedLate)
	}
	res = runOpenAgainst(t, s.GRPCAddr(), Config{
		Rate: 100, MaxInFlight: 1000, DropAfter: 5 * time.Millisecond, Duration: 300 * time.Millisecond,
	})
	if res.Open.DroppedLate == 0 || res.Decisions != 0 {
		t.Errorf("drop after 5ms of a 50ms server: %d late, %d answered in time; want all late", res.Open.DroppedLate, res.Decisions)
	}
}

// TestOpenLoopFlags: bad open-loop flags are refused, naming the flag.
func TestOpenLoopFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "-5"}, "--rate -5: want 0 (closed loop)"},
		{[]string{"--rate", "2000000"}, "--rate 2e+06: want 0 (closed loop) to 1000000"},
		{[]string{"--rate", "100", "--concurrency", "8"}, "--concurrency 8: closed loop only"},
		{[]string{"--max-in-flight", "8"}, "--max-in-flight 8: only with --rate"},
		{[]string{"--drop-after", "1s"}, "--drop-after 1s: only with --rate"},
		{[]string{"--rate", "100", "--max-in-flight", "0"}, "--max-in-flight 0: want 1 to"},
		{[]string{"--rate", "100", "--drop-after", "0s"}, "--drop-after 0s: want more than 0"},
		{[]string{"--protocol", "http"}, `--protocol "http": want rls or gubernator`},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"--addr", "127.0.0.1:1", "--timeout", "1s"}, tc.args...)
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want exit 2 naming %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestOpenReportAndHeld: open-loop results through the command line, the
// table of them, and held's verdicts.
func TestOpenReportAndHeld(t *testing.T) {
	s, err := startNoop("127.0.0.1:0", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	dir := t.TempDir()
	file := filepath.Join(dir, "noop.json")
	var out, errb bytes.Buffer
	code := run([]string{"--addr", s.GRPCAddr(), "--rate", "200", "--duration", "300ms", "--warmup", "0s",
		"--domain", "bench", "--descriptor", "user_id=%d", "--server-pid", strconv.Itoa(os.Getpid()), "--json-file", file}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "open loop, 200 calls/s offered") {
		t.Errorf("text result does not say the offered rate:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"open-report", "noop=" + file, "memory=" + file, "redis=" + filepath.Join(dir, "missing.json")}, &out, &errb); code != 0 {
		t.Fatalf("open-report: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"p99 vs noop", "memory", "1.00x", "1 failed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("open-report lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"held", "--p99-max", "1h", file}, &out, &errb); code != 0 {
		t.Errorf("held under 1h: exit %d, %s%s", code, out.String(), errb.String())
	}
	if code := run([]string{"held", "--p99-max", "1ns", file}, &out, &errb); code != 1 {
		t.Errorf("held under 1ns: exit %d, want 1 (%s)", code, out.String())
	}
}

// TestGubernatorWire: a GetRateLimitsReq as gubernator.proto lays it out,
// and its answers read back: under limit, over limit, an error, a count
// that does not match.
func TestGubernatorWire(t *testing.T) {
	req := appendGetRateLimitsReq(nil, "bench", []string{"user_id=7"}, 1)
	num, typ, n := protowire.ConsumeTag(req)
	if num != fieldReqRequests || typ != protowire.BytesType || n < 0 {
		t.Fatalf("first field %d/%d, want requests", num, typ)
	}
	rl, _ := protowire.ConsumeBytes(req[n:])
	fields := map[protowire.Number]any{}
	for len(rl) > 0 {
		num, typ, n := protowire.ConsumeTag(rl)
		rl = rl[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeString(rl)
			fields[num], rl = v, rl[n:]
		} else {
			v, n := protowire.ConsumeVarint(rl)
			fields[num], rl = v, rl[n:]
		}
	}
	if fields[fieldRLName] != "bench" || fields[fieldRLUniqueKey] != "user_id=7" || fields[fieldRLHits] != uint64(1) ||
		fields[fieldRLLimit] != uint64(gubernatorLimit) || fields[fieldRLDuration] != uint64(1000) {
		t.Errorf("rate limit fields %v", fields)
	}

	resp := func(status uint64, errText string) []byte {
		var r []byte
		r = protowire.AppendTag(r, fieldRespStatus, protowire.VarintType)
		r = protowire.AppendVarint(r, status)
		if errText != "" {
			r = protowire.AppendTag(r, fieldRespError, protowire.BytesType)
			r = protowire.AppendString(r, errText)
		}
		b := protowire.AppendTag(nil, fieldRespResponses, protowire.BytesType)
		return protowire.AppendBytes(b, r)
	}
	if out, err := parseGetRateLimitsResp(resp(0, ""), 1); err != nil || out != outcomeOK {
		t.Errorf("under limit: %v, %v", out, err)
	}
	if out, err := parseGetRateLimitsResp(resp(1, ""), 1); err != nil || out != outcomeOver {
		t.Errorf("over limit: %v, %v", out, err)
	}
	if _, err := parseGetRateLimitsResp(resp(0, "no peer"), 1); err == nil || !strings.Contains(err.Error(), "no peer") {
		t.Errorf("error answer: %v", err)
	}
	if _, err := parseGetRateLimitsResp(resp(0, ""), 2); err == nil {
		t.Error("one answer for two rate limits: no error")
	}
}

// TestOpenLoopMaxRequests: --max-requests ends an open loop early, by
// count.
func TestOpenLoopMaxRequests(t *testing.T) {
	s, err := startNoop("127.0.0.1:0", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	cfg := Config{Rate: 1000, MaxInFlight: 100, DropAfter: 30 * time.Second, Duration: 30 * time.Second}
	cfg.Addr, cfg.Conns, cfg.Keys = s.GRPCAddr(), 1, 10
	cfg.Domain, cfg.Descriptor, cfg.Hits = "bench", "user_id=%d", 1
	cfg.MaxRequests, cfg.Timeout = 50, 10*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.StoppedBy != "max-requests" || res.Sent != 50 || res.Open.Scheduled != 50 {
		t.Errorf("stopped by %q after %d sent, %d scheduled; want max-requests after 50", res.StoppedBy, res.Sent, res.Open.Scheduled)
	}
}

// TestRender: gubernator's unique keys, one per descriptor of the
// template, with the key index substituted.
func TestRender(t *testing.T) {
	tmpl, err := parseTemplate("user_id=u%d,path=/v1;plan=p%d-%d")
	if err != nil {
		t.Fatal(err)
	}
	got := tmpl.render(nil, 42)
	if want := []string{"user_id=u42,path=/v1", "plan=p42-42"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("render = %q, want %q", got, want)
	}
}
