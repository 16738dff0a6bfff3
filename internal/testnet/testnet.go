// Package testnet gives a test process a loopback network of its own: a /24
// of 127.0.0.0/8, 127.A.B.0/24, on which its integration tests bind every
// server they start (redis-server "pods", TCP proxies, gateways). Two `make
// test` runs on one machine, and two packages of one run, then never bind
// the same address, whatever ports they use. On Linux every address of
// 127.0.0.0/8 is loopback: nothing needs configuring.
//
// The process claims its /24 on first use, at random among 127.100.0.0 to
// 127.254.255.0, by an exclusive flock(2) on /tmp/sluice-testnet/127.A.B.lock
// (under $TMPDIR when set) that it holds until it exits: another test
// process passes over a /24 whose lock is held. The kernel drops the lock
// of a process that dies, however it dies, so a killed run leaves nothing
// to clean up, and children (limiters, redis-server) do not inherit it.
//
// SLUICE_TESTNET=127.A.B pins the /24 instead, unclaimed: for reproducing a
// failure at the addresses it printed. Whoever sets it keeps that /24 to
// one process at a time.
package testnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// EnvVar pins the process's /24, as "127.A.B".
const EnvVar = "SLUICE_TESTNET"

// The /24s a process may claim: 127.<first..last>.<0..255>.0/24. 127.0.0.0/16
// (127.0.0.1, 127.0.0.53, 127.0.1.1 in /etc/hosts) is left alone.
const (
	firstA = 100
	lastA  = 254
)

var (
	once   sync.Once
	prefix string // "127.A.B."
	lock   *os.File
)

// IP returns host n (1 to 254) of the process's /24: "127.A.B.n".
func IP(n int) string {
	if n < 1 || n > 254 {
		panic(fmt.Sprintf("testnet: host %d is outside 1-254", n))
	}
	return Prefix() + strconv.Itoa(n)
}

// Addr returns host n's address with port: "127.A.B.n:port".
func Addr(n, port int) string { return IP(n) + ":" + strconv.Itoa(port) }

// Prefix returns the process's /24 as "127.A.B.", the part of IP(n) before
// n.
func Prefix() string {
	once.Do(func() {
		p, err := choose()
		if err != nil {
			panic("testnet: " + err.Error())
		}
		prefix = p + "."
	})
	return prefix
}

// LockDir is where the processes' claims are.
func LockDir() string { return filepath.Join(os.TempDir(), "sluice-testnet") }

// choose returns the pinned /24, or claims one.
func choose() (string, error) {
	if v, ok := os.LookupEnv(EnvVar); ok {
		if err := valid(v); err != nil {
			return "", fmt.Errorf("%s=%q: %v", EnvVar, v, err)
		}
		return v, nil
	}
	dir := LockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("claiming a loopback /24: %v (or set %s=127.A.B)", err, EnvVar)
	}
	_ = os.Chmod(dir, 0o777|os.ModeSticky) // every user's tests claim here
	var lastErr error
	for range 1000 {
		p := candidate()
		f, err := claim(filepath.Join(dir, p+".lock"))
		if err == nil {
			lock = f // held, open, until the process exits
			return p, nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("no free loopback /24 in 1000 tries under %s: last %v (or set %s=127.A.B)", dir, lastErr, EnvVar)
}

// candidate picks a /24 to try, "127.A.B" (a variable for the tests).
var candidate = func() string {
	return fmt.Sprintf("127.%d.%d", firstA+rand.IntN(lastA-firstA+1), rand.IntN(256))
}

// claim takes path's lock without waiting.
func claim(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// valid checks "127.A.B" with A and B in 0-255.
func valid(p string) error {
	parts := strings.Split(p, ".")
	if len(parts) != 3 || parts[0] != "127" {
		return errors.New("want 127.A.B, the first three numbers of a loopback /24 (e.g. 127.100.7)")
	}
	for _, s := range parts[1:] {
		if n, err := strconv.Atoi(s); err != nil || n < 0 || n > 255 || strconv.Itoa(n) != s {
			return fmt.Errorf("%q is not a number from 0 to 255", s)
		}
	}
	return nil
}
