package redis

// Errors: which replies and client errors mean a shard cannot answer.
// Invariants:
//   - FailureClass is "" for every answer, even an error reply (a script
//     error, WRONGTYPE, NOSCRIPT, a nil), and for a caller that gave up
//     (context canceled); only a shard that cannot answer has a class, and
//     only a class counts against its breaker.
//   - Replies are told apart with go-redis's predicates (IsClusterDownError,
//     IsTryAgainError, IsMasterDownError, IsLoadingError, IsMovedError,
//     IsAskError, HasErrorPrefix), never by matching strings here.

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	goredis "github.com/redis/go-redis/v9"
)

// Failure classes, the "class" label of sluice_redis_errors_total.
const (
	ClassTimeout     = "timeout"
	ClassConnection  = "connection"
	ClassClusterDown = "clusterdown"
	ClassTryAgain    = "tryagain"
	ClassMasterDown  = "masterdown"
	ClassLoading     = "loading"
	// ClassRedirect counts MOVED and ASK replies that reached a decision:
	// the slot moved and was not followed within the deadline. It is no
	// shard failure, so it never opens a breaker.
	ClassRedirect = "redirect"
)

// FailureClass says why err shows that a shard cannot answer, or returns ""
// when the shard did answer, if only with an error reply (a script error, a
// nil, WRONGTYPE...), or when the caller gave up (context canceled).
func FailureClass(err error) string {
	switch {
	case err == nil, errors.Is(err, goredis.Nil), errors.Is(err, context.Canceled), errors.Is(err, goredis.ErrClosed):
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case goredis.IsClusterDownError(err):
		return ClassClusterDown
	case goredis.IsTryAgainError(err):
		return ClassTryAgain
	case goredis.IsMasterDownError(err):
		return ClassMasterDown
	case goredis.IsLoadingError(err):
		return ClassLoading
	}
	if _, ok := errors.AsType[goredis.Error](err); ok {
		return "" // any other reply: the shard answered
	}
	ne, isNet := errors.AsType[net.Error](err)
	switch {
	case isNet && ne.Timeout(), errors.Is(err, goredis.ErrPoolTimeout):
		return ClassTimeout
	case isNet, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ClassConnection
	}
	// Anything else that is not a reply comes from the client failing to
	// reach the shard (no node for the slot, a pool exhausted...).
	return ClassConnection
}

// isRedirect reports a MOVED or ASK reply that go-redis did not follow
// within the deadline: the script did not run.
func isRedirect(err error) bool {
	if _, ok := goredis.IsMovedError(err); ok {
		return true
	}
	_, ok := goredis.IsAskError(err)
	return ok
}

// isNoScript reports a NOSCRIPT reply: the server has not cached the
// script (restarted, flushed, or a node new to the slot); EVAL sends it.
// It is asked of every call's reply: nil, the common case, must not reach
// HasErrorPrefix, which allocates.
func isNoScript(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") }
