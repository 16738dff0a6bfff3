// Package testwait sizes the deadlines of the tests' waits to the machine
// they run on. A deadline is only the bound at which a failure shows: on a
// machine loaded far past its cores (two test suites and their builds on
// two cores reach a load of 30 and more), a condition that takes a second
// when idle can take minutes, so a deadline that passes there is extended,
// a bounded number of times, instead of failing a test that is only slow.
package testwait

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// LoadedPerCore is the 1-minute load average per core above which a
// machine counts as loaded.
const LoadedPerCore = 4.0

// MaxExtensions bounds how often a deadline is extended: a condition that
// never comes true fails after at most (1+MaxExtensions) times its wait.
const MaxExtensions = 2

// Deadline is one wait's deadline.
type Deadline struct {
	at       time.Time
	within   time.Duration
	extended int
	// load reads the 1-minute load average per core (0 when unknown).
	load func() float64
}

// New starts a deadline within from now.
func New(within time.Duration) *Deadline {
	return &Deadline{at: time.Now().Add(within), within: within, load: LoadPerCore}
}

// Passed reports whether the deadline has passed. When it has, on a loaded
// machine, it moves by another within instead (at most MaxExtensions
// times), says so through logf, and reports false.
func (d *Deadline) Passed(logf func(format string, args ...any)) bool {
	if time.Now().Before(d.at) {
		return false
	}
	if l := d.load(); d.extended < MaxExtensions && l > LoadedPerCore {
		d.extended++
		d.at = time.Now().Add(d.within)
		logf("the machine is loaded (load %.1f per core): waiting %v more (extension %d of %d)", l, d.within, d.extended, MaxExtensions)
		return false
	}
	return true
}

// Waited is how long the deadline allowed in all: within and its extensions.
func (d *Deadline) Waited() time.Duration {
	return time.Duration(1+d.extended) * d.within
}

// LoadPerCore is the machine's 1-minute load average divided by its cores,
// from /proc/loadavg (0 where there is none).
func LoadPerCore() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	l, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0
	}
	return l / float64(runtime.NumCPU())
}
