package rediscluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// conn is a connection to one member for one pass.
type conn struct {
	m Member
	c *goredis.Client
	o *options
}

func dialMember(m Member, spec *Spec, o *options) *conn {
	return &conn{m: m, o: o, c: goredis.NewClient(&goredis.Options{
		Addr:            m.Addr,
		Username:        spec.Username,
		Password:        spec.Password,
		TLSConfig:       spec.TLS,
		Protocol:        2,
		DisableIdentity: true,
		Dialer:          tlsDialer(o.dial, spec.TLS),
		DialTimeout:     o.timeout,
		ReadTimeout:     o.timeout,
		WriteTimeout:    o.timeout,
		MaxRetries:      -1,
		PoolSize:        2,
		PoolTimeout:     o.timeout,
	})}
}

// tlsDialer is dial with TLS on top: go-redis applies TLSConfig only in
// its own dialer. nil stays nil (go-redis's dialer).
func tlsDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), conf *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil || conf == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, conf.Clone())
		if err := c.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return c, nil
	}
}

func (c *conn) close() { _ = c.c.Close() }

// do sends one command with the pass's deadline.
func (c *conn) do(ctx context.Context, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout)
	defer cancel()
	return c.c.Do(ctx, args...).Result()
}

// text sends a command whose reply is a string.
func (c *conn) text(ctx context.Context, args ...any) (string, error) {
	v, err := c.do(ctx, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", garbage(fmt.Errorf("%v: want a string reply, got %T", args, v))
	}
	return s, nil
}

// errGarbage marks a reply that is not what Redis answers.
type errGarbage struct{ error }

func garbage(err error) error { return errGarbage{err} }

// nodeError names why talking to c failed.
func (c *conn) nodeError(err error) *NodeError {
	return &NodeError{Pod: c.m.Pod, Addr: c.m.Addr, Reason: reason(err), Err: err}
}

func reason(err error) string {
	var g errGarbage
	var rerr goredis.Error
	var nerr net.Error
	msg := err.Error()
	switch {
	case errors.As(err, &g):
		return ReasonGarbage
	case errors.As(err, &rerr):
		msg = rerr.Error()
		switch {
		case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOPERM"),
			strings.Contains(msg, "AUTH") && strings.Contains(msg, "password"):
			return ReasonAuthFailed
		case strings.Contains(msg, "cluster support disabled"):
			return ReasonNotClusterNode
		}
		return ReasonGarbage
	case strings.Contains(msg, "redis: invalid reply"), strings.Contains(msg, "redis: can't parse"):
		return ReasonGarbage
	case errors.As(err, &nerr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, goredis.ErrClosed):
		return ReasonUnreachable
	}
	return ReasonUnreachable
}
