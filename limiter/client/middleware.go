package client

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// costKey is the context key of a request's actual cost, set by SetCost.
type costKey struct{}

// cost is the actual cost a handler reports; -1 until it does.
type cost struct{ n atomic.Int64 }

// SetCost reports the actual cost of the request that ctx belongs to (a
// request the Middleware or the UnaryServerInterceptor admitted): its
// reservations are settled at it when the handler returns. Without it,
// they are settled at their estimate. It reports whether ctx is such a
// request's.
func SetCost(ctx context.Context, n int64) bool {
	c, ok := ctx.Value(costKey{}).(*cost)
	if ok {
		c.n.Store(max(0, n))
	}
	return ok
}

func withCost(ctx context.Context) (context.Context, *cost) {
	c := &cost{}
	c.n.Store(-1)
	return context.WithValue(ctx, costKey{}, c), c
}

// end ends d's lease when the request is done: settled at the reported
// cost, else released. It is given its own deadline: the request's context
// may have ended with it.
func (c *Client) end(d *Decision, k *cost) error {
	if d.Lease == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.hc.Timeout+time.Second)
	defer cancel()
	var err error
	if n := k.n.Load(); n >= 0 {
		_, err = d.Lease.Settle(ctx, n)
	} else {
		_, err = d.Lease.Release(ctx)
	}
	if errors.Is(err, ErrNotHeld) {
		return nil // expired while the request ran: nothing held
	}
	return err
}

// HTTPDescriber maps an incoming request to the check it makes; ok false
// serves it unchecked.
type HTTPDescriber func(r *http.Request) (req Request, ok bool)

// Middleware limits next with the checks describe makes. A denied request
// is answered 429 (or a penalized key's spec.penalty.status, such as 403)
// with the limiter's headers (RateLimit, RateLimit-Policy, X-RateLimit-*,
// Retry-After, X-Sluice-Reason), and one the failure mode denies when the
// limiter can't be reached 429. An allowed one gets the headers and is
// served; when the handler returns, its lease is ended: settled at the
// cost the handler reported with SetCost, or released. A check the
// limiter refuses as invalid (a describer's bug) is answered 500 naming
// it. OnError, when set, hears the errors of ending leases.
func (c *Client) Middleware(describe HTTPDescriber, onError func(error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, ok := describe(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			d, err := c.Check(r.Context(), req)
			if err != nil {
				if r.Context().Err() == nil {
					http.Error(w, "rate limit check failed: "+err.Error(), http.StatusInternalServerError)
				}
				return
			}
			for k, vs := range d.Header {
				w.Header()[k] = vs
			}
			if !d.Allowed {
				if d.Unavailable {
					w.Header().Set("X-Sluice-Reason", "limiter unavailable (failure mode Closed)")
				}
				http.Error(w, "rate limited: retry after "+strconv.Itoa(int(max(time.Second, d.RetryAfter)/time.Second))+"s", d.Status)
				return
			}
			ctx, k := withCost(r.Context())
			defer func() {
				if err := c.end(d, k); err != nil && onError != nil {
					onError(err)
				}
			}()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// GRPCDescriber maps an incoming unary call to the check it makes; ok
// false serves it unchecked.
type GRPCDescriber func(ctx context.Context, fullMethod string, req any) (r Request, ok bool)

// UnaryServerInterceptor limits unary calls with the checks describe
// makes, as Middleware does HTTP requests: a denied call fails with
// RESOURCE_EXHAUSTED, the limiter's headers sent as response header
// metadata (lower-case names, such as retry-after); an allowed one gets
// them too, and its lease is ended when the handler returns (settled at
// the cost the handler reported with SetCost, or released). A check the
// limiter refuses as invalid fails the call with INTERNAL.
func (c *Client) UnaryServerInterceptor(describe GRPCDescriber, onError func(error)) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r, ok := describe(ctx, info.FullMethod, req)
		if !ok {
			return handler(ctx, req)
		}
		d, err := c.Check(ctx, r)
		if err != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return nil, status.Error(codes.Internal, "rate limit check failed: "+err.Error())
		}
		md := metadata.MD{}
		for k, vs := range d.Header {
			md[strings.ToLower(k)] = vs
		}
		if len(md) > 0 {
			_ = grpc.SetHeader(ctx, md)
		}
		if !d.Allowed {
			msg := "rate limited: retry after " + strconv.Itoa(int(max(time.Second, d.RetryAfter)/time.Second)) + "s"
			if d.Unavailable {
				msg += " (limiter unavailable, failure mode Closed)"
			}
			return nil, status.Error(codes.ResourceExhausted, msg)
		}
		ctx, k := withCost(ctx)
		defer func() {
			if err := c.end(d, k); err != nil && onError != nil {
				onError(err)
			}
		}()
		return handler(ctx, req)
	}
}
