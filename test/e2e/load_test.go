package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// interval is one line of `e2eclient load`: the calls answered in the
// interval that ended at T (Unix milliseconds).
type interval struct {
	T         int64            `json:"t"`
	OK        int64            `json:"ok"`
	OverLimit int64            `json:"overLimit"`
	Failed    int64            `json:"failed"`
	Skipped   int64            `json:"skipped"`
	Errors    map[string]int64 `json:"errors"`
	Done      bool             `json:"done"`
}

func (iv interval) end() time.Time { return time.UnixMilli(iv.T) }

// load is steady load that a client pod sends while the test does
// something to the cluster: `e2eclient load` under kubectl exec, which
// stops when its stdin closes.
type load struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu     sync.Mutex
	ivs    []interval
	total  *interval
	stderr strings.Builder
}

// startLoad starts `e2eclient load args...` in pod ns/pod.
func (c *cluster) startLoad(t *testing.T, ns, pod string, args ...string) *load {
	t.Helper()
	cmd := exec.Command(c.kubectlBin, append([]string{"exec", "-i", "-n", ns, pod, "--", "/e2eclient", "load"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	l := &load{cmd: cmd, done: make(chan struct{})}
	var err error
	if l.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedWriter{mu: &l.mu, b: &l.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var iv interval
			if err := json.Unmarshal(sc.Bytes(), &iv); err != nil {
				continue
			}
			l.mu.Lock()
			if iv.Done {
				l.total = &iv
			} else {
				l.ivs = append(l.ivs, iv)
			}
			l.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { l.stop() })
	return l
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// stop ends the load and returns its totals.
func (l *load) stop() *interval {
	_ = l.stdin.Close()
	select {
	case <-l.done:
	case <-time.After(15 * time.Second):
		_ = l.cmd.Process.Kill()
		<-l.done
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// intervals returns the intervals so far.
func (l *load) intervals() []interval {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]interval(nil), l.ivs...)
}

// noise is what the load's failures look like before a fault, on this
// machine: decisions that miss the limiters' 20ms Redis deadline when the
// node is busy fail too (failureMode Closed answers them), and a shared
// development machine is busy. A second of load counts as failing when it
// has more failed decisions than threshold.
type noise struct {
	Answered, Failed int64
	MaxPerSecond     int64
	Window           time.Duration
}

func (n noise) threshold() int64 { return max(3, 2*n.MaxPerSecond) }

func (n noise) String() string {
	return fmt.Sprintf("%d failed of %d in the %v before (at most %d a second)", n.Failed, n.Answered, n.Window, n.MaxPerSecond)
}

// second is one second of load.
type second struct {
	start                    time.Time
	answered, failed, rpcErr int64
}

// seconds sums the intervals that ended in [from, to) into whole seconds
// from from.
func (l *load) seconds(from, to time.Time) []second {
	var ss []second
	for _, iv := range l.intervals() {
		e := iv.end()
		if e.Before(from) || !e.Before(to) {
			continue
		}
		i := int(e.Sub(from) / time.Second)
		for len(ss) <= i {
			ss = append(ss, second{start: from.Add(time.Duration(len(ss)) * time.Second)})
		}
		ss[i].answered += iv.OK + iv.OverLimit + iv.Failed
		ss[i].failed += iv.Failed
		for k, v := range iv.Errors {
			if strings.HasPrefix(k, "rpc error") {
				ss[i].rpcErr += v
			}
		}
	}
	return ss
}

// measureNoise waits for the load to run, then measures its failures over
// window: the noise a fault's failures are told apart from.
func (l *load) measureNoise(t *testing.T, window time.Duration) noise {
	t.Helper()
	waitFor(t, "the load running", time.Minute, func() (bool, string) {
		select {
		case <-l.done:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("the load stopped: %s", l.stderr.String())
		default:
		}
		return len(l.intervals()) >= 4, "starting"
	})
	from := time.Now()
	time.Sleep(window)
	n := noise{Window: window}
	for _, s := range l.seconds(from, time.Now()) {
		n.Answered += s.answered
		n.Failed += s.failed
		n.MaxPerSecond = max(n.MaxPerSecond, s.failed)
	}
	if n.Answered == 0 {
		t.Fatalf("no call answered in %v of load", window)
	}
	return n
}

// waitQuiet waits until the load has run for d (whole seconds) after
// start with every second answered and none failing beyond the noise, and
// fails the test after timeout.
func (l *load) waitQuiet(t *testing.T, n noise, start time.Time, d, timeout time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%v of load without failures beyond the noise (%d a second)", d, n.threshold()), timeout, func() (bool, string) {
		select {
		case <-l.done:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("the load stopped: %s", l.stderr.String())
		default:
		}
		ss := l.seconds(start, time.Now())
		if len(ss) > 0 {
			ss = ss[:len(ss)-1] // still filling
		}
		need := int(d / time.Second)
		if len(ss) < need {
			return false, "running"
		}
		for _, s := range ss[len(ss)-need:] {
			if s.answered == 0 || s.failed > n.threshold() {
				return false, fmt.Sprintf("%d failed of %d in the second from %s", s.failed, s.answered, s.start.Format("15:04:05"))
			}
		}
		return true, ""
	})
}

// faultReport is the load from a fault on.
type faultReport struct {
	Answered, Failed, RPCErrors int64
	// Recovery is the end of the last second whose failures exceed the
	// noise, after the fault; zero when none did.
	Recovery time.Duration
	Noise    noise
	Errors   map[string]int64
}

// report sums the load from start on.
func (l *load) report(n noise, start time.Time) faultReport {
	r := faultReport{Noise: n, Errors: map[string]int64{}}
	for i, s := range l.seconds(start, time.Now()) {
		r.Answered += s.answered
		r.Failed += s.failed
		r.RPCErrors += s.rpcErr
		if s.failed > n.threshold() {
			r.Recovery = time.Duration(i+1) * time.Second
		}
	}
	for _, iv := range l.intervals() {
		if iv.end().Before(start) {
			continue
		}
		for k, v := range iv.Errors {
			r.Errors[k] += v
		}
	}
	return r
}

// busyTolerance is the share of decisions a fault that should fail none
// may still lose to the limiters' 20ms Redis deadline on this shared
// 2-core machine, beyond the noise measured before it: the fault itself
// (pods starting, a rollout) adds load the measurement did not see. Seen
// here: 0 to 9 of about 4000 (0.25%) at load averages of 15 to 25. A
// limiter that lost its store while draining would fail hundreds.
const busyTolerance = 0.005

// clean says whether a fault that should fail no decision failed none: no
// RPC error at all, and no second beyond the noise, or only store decisions
// within busyTolerance.
func (r faultReport) clean() bool {
	if r.RPCErrors > 0 {
		return false
	}
	return r.Recovery == 0 || float64(r.Failed) <= busyTolerance*float64(r.Answered)
}

func (r faultReport) String() string {
	type kv struct {
		k string
		v int64
	}
	var errs []kv
	for k, v := range r.Errors {
		errs = append(errs, kv{k, v})
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].v > errs[j].v })
	if len(errs) > 3 {
		errs = errs[:3]
	}
	rec := "no second failed beyond the noise"
	if r.Recovery > 0 {
		rec = fmt.Sprintf("failing beyond the noise until %v after the fault", r.Recovery)
		if r.RPCErrors == 0 && float64(r.Failed) <= busyTolerance*float64(r.Answered) {
			rec += fmt.Sprintf(" (%.2f%% of the decisions: within the busy machine's %.1f%%)", 100*float64(r.Failed)/float64(r.Answered), 100*busyTolerance)
		}
	}
	return fmt.Sprintf("%d failed decisions of %d (%d RPC errors), %s; noise: %s %v",
		r.Failed, r.Answered, r.RPCErrors, rec, r.Noise, errs)
}
