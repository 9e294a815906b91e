package framework

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Ceph runs the Ceph CLI with admin rights against the cluster the volumes
// live in, to check Ceph's own copy of the data, never through rackcache.
type Ceph struct{ cfg CephConfig }

// NewCeph returns the checker, or an error when the suite has no admin
// access to Ceph (CEPH_CONF).
func NewCeph(cfg CephConfig) (*Ceph, error) {
	if cfg.Conf == "" {
		return nil, fmt.Errorf("CEPH_CONF is not set: the suite cannot read Ceph's own copy")
	}
	return &Ceph{cfg: cfg}, nil
}

func (c *Ceph) command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	full := append([]string{tool, "--conf", c.cfg.Conf}, args...)
	if c.cfg.NetNS != "" {
		// Ceph listens only inside the local cluster's network namespace.
		full = append([]string{"nsenter", "--net=/run/netns/" + c.cfg.NetNS}, full...)
	}
	return exec.CommandContext(ctx, full[0], full[1:]...)
}

// ImageExists reports whether pool/image exists.
func (c *Ceph) ImageExists(ctx context.Context, image string) (bool, error) {
	images, err := c.Images(ctx)
	if err != nil {
		return false, err
	}
	for _, i := range images {
		if i == image {
			return true, nil
		}
	}
	return false, nil
}

// Images lists the pool's images.
func (c *Ceph) Images(ctx context.Context) ([]string, error) {
	var out bytes.Buffer
	cmd := c.command(ctx, "rbd", "ls", "--format", "json", "--pool", c.cfg.Pool)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("rbd ls %s: %w", c.cfg.Pool, err)
	}
	var images []string
	if err := json.Unmarshal(out.Bytes(), &images); err != nil {
		return nil, fmt.Errorf("rbd ls output %q: %w", out.String(), err)
	}
	return images, nil
}

// ImageSize returns pool/image's size in bytes.
func (c *Ceph) ImageSize(ctx context.Context, image string) (int64, error) {
	var out bytes.Buffer
	cmd := c.command(ctx, "rbd", "info", "--format", "json", c.cfg.Pool+"/"+image)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("rbd info %s: %w", image, err)
	}
	var info struct {
		Size int64 `json:"size"`
	}
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		return 0, fmt.Errorf("rbd info output: %w", err)
	}
	return info.Size, nil
}

// MD5 returns the md5 of the first n bytes of pool/image as Ceph stores
// them (rbd export to stdout).
func (c *Ceph) MD5(ctx context.Context, image string, n int64) (string, error) {
	cmd := c.command(ctx, "rbd", "export", "--no-progress", c.cfg.Pool+"/"+image, "-")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("rbd export %s: %w", image, err)
	}
	h := md5.New()
	_, copyErr := io.CopyN(h, stdout, n)
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("rbd export %s: %w: %s", image, err, strings.TrimSpace(stderr.String()))
	}
	if copyErr != nil {
		return "", fmt.Errorf("rbd export %s: read %d bytes: %w", image, n, copyErr)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
