package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// slowCall is how long a call may take before it is logged as slow.
const slowCall = 30 * time.Second

// Listen opens the endpoint: unix:///path (a stale socket file is
// removed first) or tcp://host:port.
func Listen(endpoint string) (net.Listener, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if u.Host != "" {
			path = u.Host + u.Path
		}
		if path == "" {
			return nil, fmt.Errorf("endpoint %q: no socket path", endpoint)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove the stale socket %s: %w", path, err)
		}
		return net.Listen("unix", path)
	case "tcp":
		return net.Listen("tcp", u.Host)
	}
	return nil, fmt.Errorf("endpoint %q: want unix:///path or tcp://host:port", endpoint)
}

// NewServer is a gRPC server with the driver's services registered (those
// of its mode) behind the middleware chain.
func NewServer(d *Driver, log logr.Logger) *grpc.Server {
	var ids atomic.Uint64
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		requestContext(log, &ids),
		logCalls,
		recoverPanics,
		mapErrors,
	))
	csi.RegisterIdentityServer(srv, d)
	if d.mode.controller() {
		csi.RegisterControllerServer(srv, d)
	}
	if d.mode.node() {
		csi.RegisterNodeServer(srv, d)
	}
	return srv
}

// requestContext gives every call a request id and a logger carrying it
// and the method.
func requestContext(log logr.Logger, ids *atomic.Uint64) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		l := log.WithValues("method", info.FullMethod, "requestID", fmt.Sprintf("req-%06d", ids.Add(1)))
		return h(logr.NewContext(ctx, l), req)
	}
}

// logCalls logs each call with its request, secrets stripped, its result
// and, past slowCall, that it was slow. Probe and the capability calls are
// logged at V(5) only: the sidecars poll them.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	log := logr.FromContextOrDiscard(ctx)
	v := 0
	if quiet(info.FullMethod) {
		v = 5
	}
	log.V(v+2).Info("call", "request", protosanitizer.StripSecrets(req).String())
	start := time.Now()
	resp, err := h(ctx, req)
	took := time.Since(start)
	switch {
	case err != nil:
		log.V(v).Info("call failed", "code", status.Code(err).String(), "error", err.Error(), "took", took.String())
	default:
		log.V(v+2).Info("call done", "response", protosanitizer.StripSecrets(resp).String(), "took", took.String())
	}
	if took > slowCall {
		log.Info("slow call", "took", took.String())
	}
	return resp, err
}

func quiet(method string) bool {
	switch method {
	case csi.Identity_Probe_FullMethodName, csi.Identity_GetPluginInfo_FullMethodName,
		csi.Identity_GetPluginCapabilities_FullMethodName, csi.Controller_ControllerGetCapabilities_FullMethodName,
		csi.Node_NodeGetCapabilities_FullMethodName, csi.Node_NodeGetVolumeStats_FullMethodName:
		return true
	}
	return false
}

// recoverPanics turns a panic into Internal (with the stack in the log)
// rather than a crashed plugin holding half-done work.
func recoverPanics(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			logr.FromContextOrDiscard(ctx).Error(fmt.Errorf("panic: %v", r), "call panicked", "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "the driver panicked: %v", r)
		}
	}()
	return h(ctx, req)
}

// mapErrors is where the driver's errors become gRPC codes (toStatus).
func mapErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	return resp, toStatus(err)
}
