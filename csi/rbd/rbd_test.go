//go:build cgo

package rbd

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rackcache/rackcache/test/framework"
)

// TestImagesOnRealCeph runs every call against a real one-node Ceph as its
// restricted user (profile rbd): create, resize, metadata, snapshots,
// format-2 clones whose content is the snapshot's, and deletions in either
// order while clones live.
func TestImagesOnRealCeph(t *testing.T) {
	ceph := framework.StartCeph(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := ceph.Admin(ctx, "ceph", "osd", "set-require-min-compat-client", "mimic", "--yes-i-really-mean-it"); err != nil {
		t.Fatalf("require mimic clients: %v: %s", err, out)
	}
	if _, err := Connect(ctx, Credentials{Monitors: []string{ceph.MonV1}, User: ceph.User, Key: "AQBwrongwrongwrongwrongwrongwrongwrongw=="}); err == nil {
		t.Fatal("a wrong key connected")
	}
	c, err := Connect(ctx, Credentials{Monitors: []string{ceph.MonV1}, User: ceph.User, Key: ceph.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool := ceph.Pool

	if _, err := c.ImageInfo(ctx, pool, "absent"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("info of a missing image: %v, want ErrNotFound", err)
	}
	if err := c.CreateImage(ctx, pool, "parent", 8<<20, []string{"layering", "exclusive-lock"}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := c.CreateImage(ctx, pool, "bad", 8<<20, []string{"no-such-feature"}); err == nil {
		t.Error("an unknown feature was accepted")
	}
	before := bytes.Repeat([]byte("before-snapshot!"), 4096) // 64 KiB
	writeAt(t, ceph, pool, "parent", before)
	if err := c.SetImageMeta(ctx, pool, "parent", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if v, err := c.ImageMeta(ctx, pool, "parent", "k"); err != nil || v != "v" {
		t.Fatalf("metadata %q, %v", v, err)
	}
	if _, err := c.ImageMeta(ctx, pool, "parent", "absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing metadata key: %v, want ErrNotFound", err)
	}

	for i := 0; i < 2; i++ { // the second is a retry: success
		if err := c.CreateSnapshot(ctx, pool, "parent", "s1"); err != nil {
			t.Fatalf("snapshot (attempt %d): %v", i+1, err)
		}
	}
	writeAt(t, ceph, pool, "parent", bytes.Repeat([]byte("after--snapshot!"), 4096))
	snap, err := c.SnapshotInfo(ctx, pool, "parent", "s1")
	if err != nil || snap.Size != 8<<20 || time.Since(snap.Created) > time.Hour {
		t.Fatalf("snapshot info %+v, %v", snap, err)
	}
	if err := c.CloneImage(ctx, pool, "parent", "s1", "child", []string{"layering"}); err != nil {
		t.Fatalf("clone: %v", err)
	}
	if got := readAt(t, ceph, pool, "child", len(before)); !bytes.Equal(got, before) {
		t.Errorf("the clone does not hold the snapshot's data")
	}
	// The snapshot goes while its clone lives (format 2: to the trash),
	// then the parent itself (busy: to the trash too); the clone stays.
	if err := c.DeleteSnapshot(ctx, pool, "parent", "s1"); err != nil {
		t.Fatalf("delete a snapshot with a clone: %v", err)
	}
	if err := c.DeleteImage(ctx, pool, "parent"); err != nil {
		t.Fatalf("delete a parent with a clone: %v", err)
	}
	if got := readAt(t, ceph, pool, "child", len(before)); !bytes.Equal(got, before) {
		t.Errorf("the clone lost its data when its parent went")
	}
	if err := c.ResizeImage(ctx, pool, "child", 16<<20); err != nil {
		t.Fatal(err)
	}
	if info, err := c.ImageInfo(ctx, pool, "child"); err != nil || info.Size != 16<<20 {
		t.Fatalf("after growing: %+v, %v", info, err)
	}
	if err := c.ResizeImage(ctx, pool, "child", 8<<20); err == nil {
		t.Error("shrinking was accepted")
	}
	names, err := c.ListImages(ctx, pool)
	if err != nil || !contains(names, "child") || contains(names, "parent") {
		t.Errorf("images %v, %v", names, err)
	}
	if free, err := c.PoolFreeBytes(ctx, pool); err != nil || free == 0 {
		t.Errorf("free bytes %d, %v", free, err)
	}
	for i := 0; i < 2; i++ { // deleting twice: the second finds nothing, success
		if err := c.DeleteImage(ctx, pool, "child"); err != nil {
			t.Fatalf("delete (attempt %d): %v", i+1, err)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writeAt and readAt go through librbd directly (as a client would), at
// offset 0.
func writeAt(t *testing.T, ceph *framework.Ceph, pool, image string, data []byte) {
	t.Helper()
	withImage(t, ceph, pool, image, func(img *librbd.Image) {
		if _, err := img.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := img.Flush(); err != nil {
			t.Fatal(err)
		}
	})
}

func readAt(t *testing.T, ceph *framework.Ceph, pool, image string, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	withImage(t, ceph, pool, image, func(img *librbd.Image) {
		if _, err := img.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
	})
	return buf
}

func withImage(t *testing.T, ceph *framework.Ceph, pool, image string, fn func(*librbd.Image)) {
	t.Helper()
	c, err := Connect(context.Background(), Credentials{Monitors: []string{ceph.MonV1}, User: ceph.User, Key: ceph.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io, err := c.ioctx(pool)
	if err != nil {
		t.Fatal(err)
	}
	img, err := librbd.OpenImage(io, image, librbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = img.Close() }()
	fn(img)
}
