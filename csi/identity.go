package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GetPluginInfo names the driver.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: d.version}, nil
}

// GetPluginCapabilities describes the plugin as a whole, whichever role
// this process serves (as ceph-csi does): it has a controller service
// (the node plugin's callers learn from this that volumes are published
// to nodes first), volumes are only accessible from their cache server's
// rack, and they grow online.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}}, nil
}

// Probe is ready only when the mode's dependencies answer: the apiserver
// (controller), nvme-cli (node).
func (d *Driver) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	// Not ready is an answer, not an error: a liveness check must not
	// restart the plugin because the apiserver is briefly away.
	if err := d.ready(ctx); err != nil {
		logr.FromContextOrDiscard(ctx).Info("probe: not ready", "reason", err.Error())
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
