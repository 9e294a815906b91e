package csi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatus(t *testing.T) {
	for err, want := range map[error]codes.Code{
		errorf(ErrInvalidArgument, "x"):                     codes.InvalidArgument,
		fmt.Errorf("wrapped: %w", errorf(ErrNotFound, "x")): codes.NotFound,
		errorf(ErrAlreadyExists, "x"):                       codes.AlreadyExists,
		errorf(ErrBusy, "x"):                                codes.Aborted,
		errorf(ErrFailedPrecondition, "x"):                  codes.FailedPrecondition,
		errorf(ErrUnavailable, "x"):                         codes.Unavailable,
		errorf(ErrOutOfRange, "x"):                          codes.OutOfRange,
		errorf(ErrResourceExhausted, "x"):                   codes.ResourceExhausted,
		errorf(context.DeadlineExceeded, "x"):               codes.DeadlineExceeded,
		errors.New("surprise"):                              codes.Internal,
		status.Error(codes.Unimplemented, "x"):              codes.Unimplemented,
	} {
		if got := status.Code(toStatus(err)); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
	if toStatus(nil) != nil {
		t.Error("nil became an error")
	}
}

func TestVolumeLocks(t *testing.T) {
	l := newVolumeLocks()
	unlock, err := l.lock("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.lock("a"); !errors.Is(err, ErrBusy) {
		t.Errorf("second lock of a: %v, want ErrBusy", err)
	}
	if u, err := l.lock("b"); err != nil {
		t.Errorf("lock of b while a is held: %v", err)
	} else {
		u()
	}
	unlock()
	if u, err := l.lock("a"); err != nil {
		t.Errorf("a after release: %v", err)
	} else {
		u()
	}
}
