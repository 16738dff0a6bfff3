package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Where load may go. By default only to this machine: --addr and
// --metrics-url must be loopback addresses, so that a mistyped address
// never loads someone else's server. --allow-remote lifts that, for runs
// from a pod against a Service (see README "On Kubernetes").

// target is where a run sends its calls.
type target struct {
	// name is what results show: the address, list or dns:/// target.
	name string
	// grpcTarget is grpc.NewClient's target for it.
	grpcTarget string
	// addrs, for a list, are its host:port addresses, resolved by a manual
	// resolver per connection.
	addrs []string
	// balanced: several servers may answer (a list, or a DNS name of a
	// headless Service): calls go round robin over all of them, and are
	// counted per server.
	balanced bool
}

// roundRobin is the service config of a balanced target.
const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// parseTarget reads --addr: host:port; a comma-separated list of
// host:port, balanced round robin; or dns:///name:port, whose every address
// (a headless Service's ready pods) is balanced round robin and re-resolved
// as gRPC's DNS resolver does. Without allowRemote every host must be a
// loopback address, and dns:/// is refused (a name may resolve anywhere).
func parseTarget(addr string, allowRemote bool) (target, error) {
	if rest, ok := strings.CutPrefix(addr, "dns:///"); ok {
		if !allowRemote {
			return target{}, fmt.Errorf("--addr %q: a DNS name may resolve to any machine: pass --allow-remote to send load to it", addr)
		}
		if _, err := checkHostPort("--addr", rest, true); err != nil {
			return target{}, err
		}
		return target{name: addr, grpcTarget: addr, balanced: true}, nil
	}
	if strings.Contains(addr, ",") {
		var t target
		for _, a := range strings.Split(addr, ",") {
			hp, err := checkHostPort("--addr", strings.TrimSpace(a), allowRemote)
			if err != nil {
				return target{}, err
			}
			t.addrs = append(t.addrs, hp)
		}
		t.name, t.balanced = strings.Join(t.addrs, ","), true
		return t, nil
	}
	hp, err := checkHostPort("--addr", addr, allowRemote)
	if err != nil {
		return target{}, err
	}
	// passthrough: the address goes to the dialer as it is, no resolver.
	return target{name: hp, grpcTarget: "passthrough:///" + hp}, nil
}

// dialOptions are the extra options of one connection to t: its own
// manual resolver for a list (a manual resolver serves one connection),
// round robin when balanced.
func (t target) dialOptions() (string, []grpc.DialOption) {
	if !t.balanced {
		return t.grpcTarget, nil
	}
	opts := []grpc.DialOption{grpc.WithDefaultServiceConfig(roundRobin)}
	if len(t.addrs) == 0 {
		return t.grpcTarget, opts
	}
	r := manual.NewBuilderWithScheme("sluice-loadgen")
	state := resolver.State{}
	for _, a := range t.addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(state)
	return r.Scheme() + ":///list", append(opts, grpc.WithResolvers(r))
}

// checkHostPort checks that addr is host:port and returns it, with
// "localhost" as 127.0.0.1 (no DNS look-up). Without allowRemote the host
// must be on the loopback range (127.0.0.0/8, ::1); with it, any IP but an
// unspecified one (0.0.0.0, ::), or a DNS name.
func checkHostPort(what, addr string, allowRemote bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w (want host:port, such as 127.0.0.1:8081)", what, addr, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("%s %q: port %q is not a number from 1 to 65535", what, addr, port)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsLoopback():
		return net.JoinHostPort(ip.String(), port), nil
	case !allowRemote:
		return "", fmt.Errorf("%s %q: refusing a target that is not a loopback address: only 127.0.0.0/8, [::1] and localhost are allowed (pass --allow-remote to send load elsewhere, such as to a Service from a pod)", what, addr)
	case ip != nil && ip.IsUnspecified():
		return "", fmt.Errorf("%s %q: %s is no server's address", what, addr, host)
	case ip != nil:
		return net.JoinHostPort(ip.String(), port), nil
	case host == "":
		return "", fmt.Errorf("%s %q: no host", what, addr)
	}
	return net.JoinHostPort(host, port), nil
}

// loopbackHostPort is checkHostPort without --allow-remote.
func loopbackHostPort(what, addr string) (string, error) { return checkHostPort(what, addr, false) }

// checkURL checks that raw is an http:// URL whose host checkHostPort
// accepts, and returns it with that host.
func checkURL(what, raw string, allowRemote bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", what, raw, err)
	}
	if u.Scheme != "http" {
		return "", fmt.Errorf("%s %q: only http:// URLs are supported", what, raw)
	}
	if u.User != nil {
		return "", fmt.Errorf("%s %q: credentials in the URL are not supported", what, raw)
	}
	hostport := u.Host
	if u.Port() == "" {
		hostport = net.JoinHostPort(u.Hostname(), "80")
	}
	hp, err := checkHostPort(what, hostport, allowRemote)
	if err != nil {
		return "", err
	}
	u.Host = hp
	return u.String(), nil
}

// loopbackURL is checkURL without --allow-remote.
func loopbackURL(what, raw string) (string, error) { return checkURL(what, raw, false) }

var errNotLoopback = errors.New("redirect to another host refused")
