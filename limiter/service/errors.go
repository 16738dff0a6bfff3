package service

import (
	"errors"
	"fmt"
)

// ErrInvalidArgument is matched (errors.Is) by the error of every request
// the service refuses to decide; an *InvalidArgumentError says why. The
// adapters answer it as gRPC InvalidArgument and HTTP 400. It is the only
// kind of error the service returns: a store that can't answer is resolved
// by each policy's failure mode, not reported.
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
