package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// cpuSource reads one process's cumulative CPU time (user + system) in
// seconds.
type cpuSource struct {
	Name string
	read func(ctx context.Context) (float64, error)
}

// pidSource reads utime+stime from /proc/PID/stat.
func pidSource(pid int) (cpuSource, error) {
	if pid <= 0 {
		return cpuSource{}, fmt.Errorf("--server-pid %d: not a process id", pid)
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return cpuSource{}, err
	}
	comm, _, err := readProcStat(fs, pid)
	if err != nil {
		return cpuSource{}, fmt.Errorf("--server-pid %d: %w", pid, err)
	}
	return cpuSource{
		Name: fmt.Sprintf("%s[%d]", comm, pid),
		read: func(context.Context) (float64, error) {
			_, s, err := readProcStat(fs, pid)
			return s, err
		},
	}, nil
}

// readProcStat returns a process's command name and utime+stime in
// seconds.
func readProcStat(fs procfs.FS, pid int) (string, float64, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return "", 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return "", 0, err
	}
	return st.Comm, st.CPUTime(), nil
}

// metricsSource scrapes process_cpu_seconds_total from a Prometheus text
// endpoint on a loopback address, or anywhere with allowRemote.
func metricsSource(rawURL string, allowRemote bool) (cpuSource, error) {
	u, err := checkURL("--metrics-url", rawURL, allowRemote)
	if err != nil {
		return cpuSource{}, err
	}
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return errNotLoopback },
	}
	return cpuSource{
		Name: u,
		read: func(ctx context.Context) (float64, error) { return scrapeCPU(ctx, client, u) },
	}, nil
}

func scrapeCPU(ctx context.Context, client *http.Client, u string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	v, ok, err := parseCPUMetric(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	if !ok {
		return 0, fmt.Errorf("GET %s: no process_cpu_seconds_total metric (is the process collector registered?)", u)
	}
	return v, nil
}

// parseCPUMetric finds process_cpu_seconds_total in Prometheus text format.
func parseCPUMetric(r io.Reader) (float64, bool, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, false, err
	}
	mf := mfs["process_cpu_seconds_total"]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return 0, false, nil
	}
	m := mf.GetMetric()[0]
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue(), true, nil
	case m.Untyped != nil:
		return m.GetUntyped().GetValue(), true, nil
	}
	return 0, false, fmt.Errorf("process_cpu_seconds_total is a %s, not a counter", mf.GetType())
}

// selfCPU is this process's own CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// machineBusy is the CPU time, in seconds, that all cores of this machine
// spent on anything but idle and iowait, from the first line of /proc/stat.
func machineBusy() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	return machineBusyIn(fs)
}

// machineBusyIn is machineBusy from the /proc at fs.
func machineBusyIn(fs procfs.FS) (float64, error) {
	st, err := fs.Stat()
	if err != nil {
		return 0, err
	}
	c := st.CPUTotal
	// Guest time is already counted in user.
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal, nil
}
