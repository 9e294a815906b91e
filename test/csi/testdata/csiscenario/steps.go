package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// The file the snapshot step writes before its snapshot; test/csi searches
// Ceph's copy of the snapshot for its first 4 KiB block.
const snapshotFileSeed = "rackcache-snapshot-file"

func (s *scenario) run(ctx context.Context) {
	info := must(s.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}))("node get info")
	s.nodeID = info.NodeId

	// A volume wanted in this node's rack is served from that rack.
	v1 := s.create(ctx, "data-1", mountCap(), nil, nil)
	fmt.Printf("topology=%s\n", v1.vol.AccessibleTopology[0].Segments[*rackLabel])

	// Stage, publish, write; unpublish, unstage; again: the files are there.
	s.publish(ctx, v1)
	s.attach(ctx, v1)
	a := Pattern("rackcache-file-a", 3*mib+17)
	if err := writeSynced(filepath.Join(v1.target, "a.bin"), a); err != nil {
		fail("write a.bin", err)
	}
	s.detach(ctx, v1)
	fmt.Printf("disconnected-after-unstage=%t\n", len(controllersOf(subNQN(v1))) == 0)
	s.attach(ctx, v1)
	fmt.Printf("files-intact=%t\n", sameFile(filepath.Join(v1.target, "a.bin"), a))

	// A snapshot of the write-back volume holds every write acknowledged
	// before it: read back through a volume restored from it.
	b := Pattern(snapshotFileSeed, 512*1024)
	if err := writeSynced(filepath.Join(v1.target, "b.bin"), b); err != nil {
		fail("write b.bin", err)
	}
	snap := must(s.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{
		SourceVolumeId: v1.vol.VolumeId, Name: "snap-1", Secrets: s.secrets,
	}))("create snapshot")
	fmt.Printf("snapshot-id=%s\n", snap.Snapshot.SnapshotId)
	v2 := s.create(ctx, "data-2", mountCap(), &csi.VolumeContentSource{
		Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}},
	}, nil)
	s.publish(ctx, v2)
	s.attach(ctx, v2)
	fmt.Printf("snapshot-holds-writes=%t\n", sameFile(filepath.Join(v2.target, "b.bin"), b) && sameFile(filepath.Join(v2.target, "a.bin"), a))
	s.detach(ctx, v2)

	// Writes go on while a write-back volume is snapshotted: the snapshot
	// is a prefix of them (test/csi reads Ceph's copy; it deletes the
	// snapshot, then the volume).
	v5 := s.create(ctx, "data-5", blockCap(), nil, nil)
	s.publish(ctx, v5)
	s.attach(ctx, v5)
	before, after, prefixSnap := s.snapshotUnderWrites(ctx, v5)
	fmt.Printf("prefix-snapshot-id=%s\nprefix-volume-id=%s\nprefix-acked=%d,%d\n", prefixSnap, v5.vol.VolumeId, before, after)
	s.detach(ctx, v5)

	// Online expansion, as csi-resizer and the kubelet do it: the
	// controller grows the image and the namespace, the guest's kernel sees
	// the new size, the node grows the mounted ext4; the files stay.
	fsBefore := statfsBytes(v1.target)
	grown := int64(128 * mib)
	exp := must(s.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId: v1.vol.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: grown},
		Secrets: s.secrets, VolumeCapability: v1.vcap,
	}))("controller expand data-1")
	nexp := must(s.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{
		VolumeId: v1.vol.VolumeId, VolumePath: v1.target, StagingTargetPath: v1.stage,
		CapacityRange: &csi.CapacityRange{RequiredBytes: grown}, VolumeCapability: v1.vcap,
	}))("node expand data-1")
	fsAfter := statfsBytes(v1.target)
	fmt.Printf("expand-fs-bytes=%d,%d\n", fsBefore, fsAfter)
	fmt.Printf("expanded-volume-id=%s\n", v1.vol.VolumeId)
	fmt.Printf("expanded=%t\n", exp.CapacityBytes == grown && exp.NodeExpansionRequired &&
		nexp.CapacityBytes >= grown && fsAfter > fsBefore+48*mib &&
		sameFile(filepath.Join(v1.target, "a.bin"), a))
	big := Pattern("rackcache-after-expand", 80*mib)
	if err := writeSynced(filepath.Join(v1.target, "big.bin"), big); err != nil {
		fail("write 80 MiB after expanding", err)
	}
	fmt.Printf("expanded-writable=%t\n", sameFile(filepath.Join(v1.target, "big.bin"), big))

	// A host NQN the volume was not published to is refused by the target.
	v3 := s.create(ctx, "data-3", blockCap(), nil, nil)
	err := s.stage(ctx, v3)
	fmt.Printf("unpublished-refused=%t\n", err != nil && len(controllersOf(subNQN(v3))) == 0)
	if err == nil {
		s.detach(ctx, v3)
	}

	// Unpublish revokes: the dataplane refuses the host and ends its live
	// connection (a short ctrl-loss-tmo, so the kernel gives up soon).
	v4 := s.create(ctx, "data-4", blockCap(), nil, map[string]string{"ctrlLossTmo": "3", "reconnectDelay": "1"})
	s.publish(ctx, v4)
	if err := s.stage(ctx, v4); err != nil {
		fail("node stage data-4", err)
	}
	live := len(controllersOf(subNQN(v4))) > 0
	must(s.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{
		VolumeId: v4.vol.VolumeId, NodeId: s.nodeID,
	}))("controller unpublish data-4")
	fmt.Printf("revoked=%t\n", live && waitNoControllers(subNQN(v4), 60*time.Second))
	must(s.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v4.vol.VolumeId, StagingTargetPath: v4.stage}))("node unstage data-4")

	// Clean up what the host does not check afterwards (it reads data-1's
	// image in Ceph, then deletes it through the controller).
	s.detach(ctx, v1)
	for _, v := range []*volume{v1, v2, v5} {
		must(s.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.vol.VolumeId, NodeId: s.nodeID}))("controller unpublish " + v.name)
	}
	for _, v := range []*volume{v2, v3, v4} {
		must(s.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.vol.VolumeId, Secrets: s.secrets}))("delete " + v.name)
	}
	fmt.Println("scenario=done")
}
