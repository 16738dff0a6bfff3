package redis

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluice-dev/sluice/limiter/tracing"
)

// tracedDecide is decide with Options.Tracing: it adds to the span of
// ctx (the service's store span) the call's shard, that shard's breaker
// state, the script it ran and how many times it was sent (more than once
// after NOSCRIPT, TRYAGAIN or a redirect), and the class of its error.
func (s *Store) tracedDecide(ctx context.Context, c *call) error {
	sp := tracing.FromContext(ctx)
	err := s.route(ctx, c)
	if !sp.Recording() {
		return err
	}
	kv := []attribute.KeyValue{attribute.String("redis.script", scriptName(c))}
	if c.brk != nil {
		kv = append(kv, attribute.String("redis.shard", c.brk.name), attribute.String("redis.breaker", c.brk.State().String()))
	}
	if err == nil || ctx.Err() == nil {
		// The round trip finished the call: its fields are ours again (a
		// call abandoned on ctx's end may still be in a round trip).
		kv = append(kv, attribute.Int("redis.sends", c.sends))
	}
	if err != nil {
		kv = append(kv, attribute.String("redis.error_class", FailureClass(err)))
	}
	sp.Set(kv...)
	return err
}

// scriptName names the script c runs: hold, grant, or the algorithm's.
func scriptName(c *call) string {
	switch {
	case c.hold != nil:
		return "hold"
	case c.grantReq != nil:
		return "grant"
	default:
		return "take/" + c.req.Limit.Algorithm.String()
	}
}
