package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorRefusesBadLeaderTiming runs the operator with leader
// election timings client-go's elector would refuse: each exits 2 before
// it reaches the API server, naming the flag that is wrong.
func TestOperatorRefusesBadLeaderTiming(t *testing.T) {
	bin := buildOperator(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--leader-elect-retry-period=0s"}, "--leader-elect-retry-period is 0s"},
		{[]string{"--leader-elect-retry-period=-1s"}, "--leader-elect-retry-period is -1s"},
		{[]string{"--leader-elect-renew-deadline=2s"}, "--leader-elect-renew-deadline (2s) must be more than 1.2 times --leader-elect-retry-period (2s)"},
		{[]string{"--leader-elect-lease-duration=10s"}, "--leader-elect-lease-duration (10s) must be more than --leader-elect-renew-deadline (10s)"},
		{[]string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=5s", "--leader-elect-retry-period=1s"}, "--leader-elect-lease-duration (4s) must be more than --leader-elect-renew-deadline (5s)"},
	} {
		cmd := exec.Command(bin, append([]string{"--leader-elect"}, tc.args...)...)
		// No cluster: a timing that passed would fail later, on the
		// kubeconfig, with another exit code.
		cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v, want exit status 2 and %q in:\n%s", tc.args, err, tc.want, out)
		}
	}
}

func TestLeaderTimingValidate(t *testing.T) {
	if err := (leaderTiming{LeaseDuration: 15e9, RenewDeadline: 10e9, RetryPeriod: 2e9}).validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	if err := (leaderTiming{LeaseDuration: 5e9, RenewDeadline: 3e9, RetryPeriod: 1e9}).validate(); err != nil {
		t.Errorf("5s, 3s, 1s: %v", err)
	}
}
