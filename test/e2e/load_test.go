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

// waitClean waits until the load has run for d with every call answered
// and none failed, and fails the test after timeout.
func (l *load) waitClean(t *testing.T, d, timeout time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%v of load without a failed decision", d), timeout, func() (bool, string) {
		select {
		case <-l.done:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("the load stopped: %s", l.stderr.String())
		default:
		}
		ivs := l.intervals()
		if len(ivs) == 0 {
			return false, "no report yet"
		}
		end := ivs[len(ivs)-1].end()
		var answered int64
		for i := len(ivs) - 1; i >= 0; i-- {
			iv := ivs[i]
			if iv.Failed > 0 {
				return false, fmt.Sprintf("%d failed at %s: %v", iv.Failed, iv.end().Format("15:04:05.000"), iv.Errors)
			}
			answered += iv.OK + iv.OverLimit
			if end.Sub(iv.end()) >= d {
				return answered > 0, "no call answered"
			}
		}
		return false, "running"
	})
}

// faultReport sums the load from start on.
type faultReport struct {
	Answered, Failed int64
	FirstFailure     time.Time
	LastFailure      time.Time // the end of the last interval with a failure
	Errors           map[string]int64
}

// report sums the intervals that ended after start.
func (l *load) report(start time.Time) faultReport {
	r := faultReport{Errors: map[string]int64{}}
	for _, iv := range l.intervals() {
		if !iv.end().After(start) {
			continue
		}
		r.Answered += iv.OK + iv.OverLimit + iv.Failed
		if iv.Failed > 0 {
			r.Failed += iv.Failed
			if r.FirstFailure.IsZero() {
				r.FirstFailure = iv.end()
			}
			r.LastFailure = iv.end()
			for k, v := range iv.Errors {
				r.Errors[k] += v
			}
		}
	}
	return r
}

// String is the report's line: failed decisions, when they stopped, and
// the most frequent reasons.
func (r faultReport) String(start time.Time) string {
	if r.Failed == 0 {
		return fmt.Sprintf("0 failed decisions of %d", r.Answered)
	}
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
	return fmt.Sprintf("%d failed decisions of %d (%.1f%%), from %v to %v after the fault (%v)",
		r.Failed, r.Answered, 100*float64(r.Failed)/float64(max(1, r.Answered)),
		r.FirstFailure.Sub(start).Round(100*time.Millisecond), r.LastFailure.Sub(start).Round(100*time.Millisecond), errs)
}
