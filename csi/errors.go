package csi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors of the driver. Every RPC returns errors wrapping one of
// them (or a gRPC status); toStatus maps them to codes in this one place.
var (
	// ErrInvalidArgument: the request is malformed or names something
	// impossible; retrying the same request cannot succeed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: the volume, snapshot or node named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: the name exists with other, incompatible parameters.
	ErrAlreadyExists = errors.New("already exists")
	// ErrBusy: another call holds the volume; the caller retries.
	ErrBusy = errors.New("an operation on this volume is already in progress")
	// ErrFailedPrecondition: the request is valid but the state is not
	// (a publish of an unstaged volume, a snapshot of a failed volume).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnavailable: a dependency (apiserver, Ceph, a cache server) does
	// not answer now; the caller retries.
	ErrUnavailable = errors.New("unavailable")
	// ErrOutOfRange: a size the driver cannot serve.
	ErrOutOfRange = errors.New("out of range")
	// ErrResourceExhausted: no cache capacity or node volume slots left.
	ErrResourceExhausted = errors.New("resource exhausted")
)

// errorf wraps a sentinel with a message saying what failed and why.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// toStatus turns any error of the driver into a gRPC status error. Errors
// that already are statuses pass through; unknown errors are Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrAlreadyExists):
		code = codes.AlreadyExists
	case errors.Is(err, ErrBusy):
		code = codes.Aborted
	case errors.Is(err, ErrFailedPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, ErrOutOfRange):
		code = codes.OutOfRange
	case errors.Is(err, ErrResourceExhausted):
		code = codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// need is one argument an RPC requires: what it is, and whether the
// request has it.
type need struct {
	what string
	ok   bool
}

// required checks an RPC's arguments in order; the first one missing is
// InvalidArgument.
func required(needs ...need) error {
	for _, n := range needs {
		if !n.ok {
			return errorf(ErrInvalidArgument, "%s is required", n.what)
		}
	}
	return nil
}
