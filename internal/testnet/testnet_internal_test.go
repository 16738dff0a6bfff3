package testnet

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, ok := range []string{"127.100.7", "127.0.0", "127.255.255"} {
		if err := valid(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, c := range []struct{ in, err string }{
		{"", "want 127.A.B"},
		{"10.1.2", "want 127.A.B"},
		{"127.1", "want 127.A.B"},
		{"127.1.2.3", "want 127.A.B"},
		{"127.256.1", `"256" is not a number from 0 to 255`},
		{"127.1.-1", `"-1" is not a number from 0 to 255`},
		{"127.01.1", `"01" is not a number from 0 to 255`},
		{"127.a.1", `"a" is not a number from 0 to 255`},
	} {
		if err := valid(c.in); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.err)
		}
	}
}

// TestChoosePinned: SLUICE_TESTNET is taken as it is, and a bad one is an
// error naming the variable and what it should be.
func TestChoosePinned(t *testing.T) {
	t.Setenv(EnvVar, "127.100.42")
	if p, err := choose(); err != nil || p != "127.100.42" {
		t.Fatalf("choose() = %q, %v with %s=127.100.42", p, err, EnvVar)
	}
	t.Setenv(EnvVar, "127.0.0.1")
	if _, err := choose(); err == nil || !strings.Contains(err.Error(), `SLUICE_TESTNET="127.0.0.1": want 127.A.B`) {
		t.Fatalf("choose() with %s=127.0.0.1: %v", EnvVar, err)
	}
}

// TestChoosePassesOverAHeldClaim: a /24 whose lock another holder has is
// not chosen; the next candidate is.
func TestChoosePassesOverAHeldClaim(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv(EnvVar, "") // restored when the test ends
	os.Unsetenv(EnvVar)
	taken, free := "127.200.1", "127.200.2"
	held, err := claim(filepath.Join(mkLockDir(t), taken+".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	next := []string{taken, taken, free}
	old := candidate
	t.Cleanup(func() { candidate = old })
	candidate = func() string { p := next[0]; next = next[1:]; return p }
	p, err := choose()
	if err != nil || p != free {
		t.Fatalf("choose() = %q, %v with %s held: want %s", p, err, taken, free)
	}
	// choose keeps the claim: a second chooser passes over both.
	next = []string{free, taken, "127.200.3"}
	if p, err := choose(); err != nil || p != "127.200.3" {
		t.Fatalf("second choose() = %q, %v: want 127.200.3", p, err)
	}
}

func mkLockDir(t *testing.T) string {
	t.Helper()
	if err := os.MkdirAll(LockDir(), 0o777); err != nil {
		t.Fatal(err)
	}
	return LockDir()
}

// TestTwoProcesses: two test processes at once, both trying the same /24
// first, have two /24s, and each can listen on its hosts; once the first
// has exited, its /24 is free again.
func TestTwoProcesses(t *testing.T) {
	a, b := "127.201.1", "127.201.2"
	if os.Getenv("TESTNET_CHILD") != "" {
		next := []string{a, b}
		candidate = func() string { p := next[0]; next = append(next[1:], p); return p }
		l, err := net.Listen("tcp", IP(1)+":0")
		if err != nil {
			t.Fatalf("listen on %s: %v", IP(1), err)
		}
		defer l.Close()
		os.Stdout.WriteString("prefix=" + Prefix() + "\n")
		// Hold the claim until the parent says.
		_, _ = os.Stdin.Read(make([]byte, 1))
		return
	}
	if os.Getenv(EnvVar) != "" {
		t.Skipf("%s is set: the processes share the pinned /24", EnvVar)
	}
	tmp := t.TempDir() // the children's lock dir: the test's alone
	type child struct {
		cmd   *exec.Cmd
		stdin io.Closer
	}
	start := func() (child, string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run", "^TestTwoProcesses$")
		cmd.Env = append(os.Environ(), "TESTNET_CHILD=1", "TMPDIR="+tmp)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "prefix=") {
			t.Fatalf("child: %q, %v", line, err)
		}
		return child{cmd, stdin}, strings.TrimSpace(strings.TrimPrefix(line, "prefix="))
	}
	first, p1 := start()
	_, p2 := start()
	if p1 != a+"." || p2 != b+"." {
		t.Fatalf("two processes at once, both trying %s first: %s and %s, want %s. and %s.", a, p1, p2, a, b)
	}
	first.stdin.Close()
	if err := first.cmd.Wait(); err != nil {
		t.Fatalf("first child: %v", err)
	}
	if _, p3 := start(); p3 != a+"." {
		t.Fatalf("after the first process exited: %s, want %s. again", p3, a)
	}
}
