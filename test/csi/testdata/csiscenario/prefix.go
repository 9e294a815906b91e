package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// PrefixBlocks bounds the writer of snapshotUnderWrites: block i of the
// volume gets PrefixStamp(i), one O_DIRECT write at a time.
const PrefixBlocks = 8192

// PrefixStamp is the content of block i (4 KiB of one repeated line).
func PrefixStamp(i int) []byte {
	line := fmt.Sprintf("rackcache-prefix-block-%08d\n", i)
	b := make([]byte, 0, 4096)
	for len(b) < 4096 {
		b = append(b, line...)
	}
	return b[:4096]
}

// snapshotUnderWrites snapshots the block volume v while a writer fills
// it block after block, each write acknowledged before the next starts.
// before: writes acknowledged when the snapshot was asked for; after:
// when it was answered. Ceph's copy of the snapshot must hold blocks
// [0, k) stamped and nothing after, with before <= k <= after + 1 (the
// write in flight may be in or out): test/csi checks it.
func (s *scenario) snapshotUnderWrites(ctx context.Context, v *volume) (before, after int64, id string) {
	f, err := os.OpenFile(v.target, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		fail("open "+v.name, err)
	}
	defer func() { _ = f.Close() }()
	// O_DIRECT wants an aligned buffer: a page of its own.
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		fail("map a buffer", err)
	}
	defer func() { _ = unix.Munmap(buf) }()
	var acked atomic.Int64
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		for i := 0; i < PrefixBlocks && !stop.Load(); i++ {
			copy(buf, PrefixStamp(i))
			if _, err := f.WriteAt(buf, int64(i)*4096); err != nil {
				done <- fmt.Errorf("write block %d: %w", i, err)
				return
			}
			acked.Store(int64(i + 1))
		}
		done <- nil
	}()
	// Some writes are dirty in the cache before the snapshot is asked for.
	for deadline := time.Now().Add(time.Minute); acked.Load() < 64 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	before = acked.Load()
	snap := must(s.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{
		SourceVolumeId: v.vol.VolumeId, Name: "snap-under-writes", Secrets: s.secrets,
	}))("snapshot under writes")
	after = acked.Load()
	stop.Store(true)
	if err := <-done; err != nil {
		fail("the writer during the snapshot", err)
	}
	return before, after, snap.Snapshot.SnapshotId
}
