package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// loopbackHostPort checks that addr is host:port on the loopback range
// (127.0.0.0/8, ::1, or "localhost", which is taken as 127.0.0.1 without a
// DNS look-up) and returns it with the host as a literal IP. Load is only
// ever sent to this machine.
func loopbackHostPort(what, addr string) (string, error) {
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
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("%s %q: refusing a target that is not a loopback address: only 127.0.0.0/8, [::1] and localhost are allowed", what, addr)
	}
	return net.JoinHostPort(ip.String(), port), nil
}

// loopbackURL checks that raw is an http:// URL on a loopback address and
// returns it with the host as a literal IP.
func loopbackURL(what, raw string) (string, error) {
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
	hp, err := loopbackHostPort(what, hostport)
	if err != nil {
		return "", err
	}
	u.Host = hp
	return u.String(), nil
}

var errNotLoopback = errors.New("redirect to another host refused")
