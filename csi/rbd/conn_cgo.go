//go:build cgo

package rbd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"
)

// connectTimeout bounds the monitor handshake (also the ops' timeouts).
const connectTimeout = 15 * time.Second

// Conn is one RADOS connection with an I/O context per pool. Its calls
// block in librbd; each runs in a goroutine so that the caller's context
// can end the wait (the librbd call itself finishes in the background).
type Conn struct {
	conn *rados.Conn
	mu   sync.Mutex
	io   map[string]*rados.IOContext
}

// Connect opens a connection from monitors, user and key alone: no
// ceph.conf, no keyring file.
func Connect(ctx context.Context, c Credentials) (*Conn, error) {
	if len(c.Monitors) == 0 || c.User == "" || c.Key == "" {
		return nil, fmt.Errorf("connect to Ceph: monitors, user and key are all required")
	}
	conn, err := rados.NewConnWithUser(strings.TrimPrefix(c.User, "client."))
	if err != nil {
		return nil, fmt.Errorf("connect to Ceph as %s: %w", c.User, err)
	}
	secs := fmt.Sprint(int(connectTimeout.Seconds()))
	for k, v := range map[string]string{
		"mon_host": strings.Join(c.Monitors, ","), "key": c.Key,
		"client_mount_timeout": secs, "rados_mon_op_timeout": secs, "rados_osd_op_timeout": secs,
	} {
		if err := conn.SetConfigOption(k, v); err != nil {
			conn.Shutdown()
			// The value is not quoted: it may be the key.
			return nil, fmt.Errorf("connect to Ceph: set option %s: %w", k, err)
		}
	}
	if err := run(ctx, conn.Connect); err != nil {
		conn.Shutdown()
		return nil, fmt.Errorf("connect to Ceph monitors %s as %s: %w", strings.Join(c.Monitors, ","), c.User, err)
	}
	return &Conn{conn: conn, io: map[string]*rados.IOContext{}}, nil
}

// Close ends the connection.
func (c *Conn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, io := range c.io {
		io.Destroy()
	}
	c.io = nil
	c.conn.Shutdown()
}

// ioctx is the pool's I/O context, opened once.
func (c *Conn) ioctx(pool string) (*rados.IOContext, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if io, ok := c.io[pool]; ok {
		return io, nil
	}
	io, err := c.conn.OpenIOContext(pool)
	if err != nil {
		return nil, fmt.Errorf("open pool %s: %w", pool, mapErr(err))
	}
	c.io[pool] = io
	return io, nil
}

// run calls fn in a goroutine and waits for it or for ctx.
func run(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("gave up waiting for librbd: %w", ctx.Err())
	}
}

// do runs fn with the pool's I/O context under ctx.
func (c *Conn) do(ctx context.Context, pool string, fn func(io *rados.IOContext) error) error {
	io, err := c.ioctx(pool)
	if err != nil {
		return err
	}
	return run(ctx, func() error { return mapErr(fn(io)) })
}

// withImage opens image (its head, not a snapshot) for fn.
func (c *Conn) withImage(ctx context.Context, pool, image string, fn func(img *librbd.Image) error) error {
	return c.do(ctx, pool, func(io *rados.IOContext) error {
		img, err := librbd.OpenImage(io, image, librbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer func() { _ = img.Close() }()
		return fn(img)
	})
}

// mapErr turns librbd's and librados' "does not exist" into ErrNotFound.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, librbd.ErrNotFound) || errors.Is(err, librbd.ErrNotExist) || errors.Is(err, rados.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
