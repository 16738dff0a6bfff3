package main

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// TestStrictLookupsTimeoutIsNotNoSuchHost sends a lookup to a DNS server
// that answers AAAA queries empty (as a cluster's DNS does for a name with
// IPv4 addresses only) and never answers A queries (as a DNS pod on a
// stopped node): Go's resolver as it is says "no such host", and with
// strictLookups a timeout, which gRPC does not take for "no address".
func TestStrictLookupsTimeoutIsNotNoSuchHost(t *testing.T) {
	server := deafToA(t)
	for _, strict := range []bool{false, true} {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "udp", server)
		}}
		if strict {
			strictLookups(r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addrs, err := r.LookupHost(ctx, "limiter-headless.team.svc.cluster.local.")
		cancel()
		var de *net.DNSError
		if !errors.As(err, &de) {
			t.Fatalf("strict %v: %v, %v: want a DNS error", strict, addrs, err)
		}
		if de.IsNotFound == strict || de.IsTimeout != strict {
			t.Errorf("strict %v: %v (not found %v, timeout %v): want not found %v, timeout %v", strict, err, de.IsNotFound, de.IsTimeout, !strict, strict)
		}
	}
}

// deafToA serves DNS on a loopback UDP port: an empty answer (NOERROR, no
// records) to every query but A, which it never answers.
func deafToA(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if m.Unpack(buf[:n]) != nil || len(m.Questions) != 1 || m.Questions[0].Type == dnsmessage.TypeA {
				continue
			}
			m.Header.Response, m.Header.RecursionAvailable = true, true
			if out, err := m.Pack(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}
