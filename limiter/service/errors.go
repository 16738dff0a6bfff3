package service

import (
	"errors"
	"fmt"
)

// ErrInvalidArgument is matched (errors.Is) by the error of every request
// the service answers with an error; an *InvalidArgumentError says why.
// Decide returns it only for a request that selects no policy
// (ValidateShape): what else a client sent that the service won't count is
// a refusal, a denial with a reason (refuse.go), since gateways fail open
// on errors. The status peek and End, which admit nothing, return it for
// everything Validate refuses. The adapters answer it as gRPC
// InvalidArgument and HTTP 400. It is the only kind of error the service
// returns: a store that can't answer is resolved by each policy's failure
// mode, not reported.
var ErrInvalidArgument = errors.New("invalid argument")

// InvalidArgumentError is a request the service refuses, with a message
// naming what is wrong with it, such as "descriptors[0] has no entries".
type InvalidArgumentError struct {
	Message string
}

func (e *InvalidArgumentError) Error() string { return e.Message }

// Is makes an InvalidArgumentError match ErrInvalidArgument.
func (e *InvalidArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

func invalidf(format string, args ...any) error {
	return &InvalidArgumentError{Message: fmt.Sprintf(format, args...)}
}
