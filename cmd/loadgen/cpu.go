package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the kernel's clock tick (sysconf(_SC_CLK_TCK)) that
// /proc/PID/stat counts in. It is 100 on every Linux architecture Go
// supports; the Prometheus process collector assumes the same.
const userHZ = 100

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
	comm, _, err := readProcStat(pid)
	if err != nil {
		return cpuSource{}, fmt.Errorf("--server-pid %d: %w", pid, err)
	}
	return cpuSource{
		Name: fmt.Sprintf("%s[%d]", comm, pid),
		read: func(context.Context) (float64, error) {
			_, s, err := readProcStat(pid)
			return s, err
		},
	}, nil
}

// readProcStat returns the command name and utime+stime in seconds.
func readProcStat(pid int) (string, float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	return parseProcStat(string(data))
}

func parseProcStat(s string) (string, float64, error) {
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
	// split after the last ')'. utime and stime are fields 14 and 15.
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, fmt.Errorf("malformed /proc stat line")
	}
	comm := s[open+1 : closing]
	f := strings.Fields(s[closing+1:])
	if len(f) < 13 {
		return "", 0, fmt.Errorf("malformed /proc stat line: %d fields", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, fmt.Errorf("malformed /proc stat utime/stime %q %q", f[11], f[12])
	}
	return comm, float64(ut+st) / userHZ, nil
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
	const name = "process_cpu_seconds_total"
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		} else if rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue // another metric whose name starts the same
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("process_cpu_seconds_total: %w", err)
		}
		return v, true, nil
	}
	return 0, false, sc.Err()
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
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineBusy(string(data))
}

func parseMachineBusy(s string) (float64, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("malformed /proc/stat")
	}
	var busy uint64
	// user nice system idle iowait irq softirq steal [guest guest_nice]:
	// guest time is already counted in user, so stop at steal.
	for i := 1; i < len(f) && i <= 8; i++ {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc/stat: %q", f[i])
		}
		if i == 4 || i == 5 { // idle, iowait
			continue
		}
		busy += v
	}
	return float64(busy) / userHZ, nil
}
