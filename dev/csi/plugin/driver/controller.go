package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// controller attaches a volume to a node by recording it and, in the fencing mode
// (fencing.go), by granting the node its own view of the volume, which
// ControllerUnpublish revokes before it removes the record.
type controller struct {
	csi.UnimplementedControllerServer
	backingDir string
	stateDir   string
	fence      *fencing // nil: no fencing, the node mounts the backing directory itself
}

// publishContextNode is the publish context's key naming the node attached to; the
// node part checks it (node.go).
const publishContextNode = "attachedNode"

// NB: volume and node ids become path names: only a plain name is accepted.
var plainName = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_.]{0,127}$`)

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
		}}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		rpc(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME),
	}}, nil
}

func (c *controller) attachment(volume, node string) string {
	return filepath.Join(c.stateDir, "attachments", volume, node)
}

func (c *controller) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	volume, node := req.GetVolumeId(), req.GetNodeId()
	if !plainName.MatchString(volume) || !plainName.MatchString(node) {
		return nil, status.Errorf(codes.InvalidArgument, "volume id %q and node id %q must be plain names", volume, node)
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Errorf(codes.InvalidArgument, "publishing volume %s to node %s: no volume capability", volume, node)
	}
	if p := capabilityProblem(req.GetVolumeCapability()); p != "" {
		return nil, status.Errorf(codes.InvalidArgument, "publishing volume %s to node %s: %s", volume, node, p)
	}
	if st, err := os.Stat(filepath.Join(c.backingDir, volume)); err != nil || !st.IsDir() {
		return nil, status.Errorf(codes.NotFound, "volume %s: no directory %s", volume, filepath.Join(c.backingDir, volume))
	}
	publishContext := map[string]string{publishContextNode: node}
	fs, err := blockKind(req.GetVolumeContext())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "publishing volume %s to node %s: %v", volume, node, err)
	}
	if fs != "" {
		// A static volume's image is made at its first publish (CreateVolume makes a provisioned one's).
		if err := createImage(filepath.Join(c.backingDir, volume), staticImageBytes, fs); err != nil {
			return nil, status.Errorf(codes.Internal, "publishing volume %s to node %s: %v", volume, node, err)
		}
		publishContext[volumeContextFS] = fs
	}
	if c.fence != nil {
		view, err := c.fence.grant(volume, node, sharedReadOnly(req.GetVolumeCapability()))
		var conflict errConflict
		var noNode errNoNode
		switch {
		case errors.As(err, &conflict):
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		case errors.As(err, &noNode):
			return nil, status.Error(codes.Unavailable, err.Error())
		case err != nil:
			return nil, status.Errorf(codes.Internal, "publishing volume %s to node %s: %v", volume, node, err)
		}
		publishContext[publishContextView] = view
	}
	record := c.attachment(volume, node)
	if err := os.MkdirAll(filepath.Dir(record), 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "recording volume %s attached to node %s: %v", volume, node, err)
	}
	mode := "rw"
	if req.GetReadonly() {
		mode = "ro"
	}
	if err := os.WriteFile(record, []byte(mode+"\n"), 0o640); err != nil {
		return nil, status.Errorf(codes.Internal, "recording volume %s attached to node %s: %v", volume, node, err)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: publishContext}, nil
}

func (c *controller) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	volume, node := req.GetVolumeId(), req.GetNodeId()
	if !plainName.MatchString(volume) || (node != "" && !plainName.MatchString(node)) {
		return nil, status.Errorf(codes.InvalidArgument, "volume id %q and node id %q must be plain names", volume, node)
	}
	// The storage's cut first: the attacher removes its finalizer only after this
	// answered, so no other node is granted the volume before (the ADC waits for it).
	if c.fence != nil {
		if err := c.fence.revoke(volume, node); err != nil {
			return nil, status.Errorf(codes.Internal, "unpublishing volume %s from node %q: %v", volume, node, err)
		}
	}
	// An empty node id means every node (CSI spec).
	targets := []string{c.attachment(volume, node)}
	if node == "" {
		entries, err := os.ReadDir(filepath.Join(c.stateDir, "attachments", volume))
		if err != nil && !os.IsNotExist(err) {
			return nil, status.Errorf(codes.Internal, "listing volume %s's attachments: %v", volume, err)
		}
		targets = targets[:0]
		for _, e := range entries {
			targets = append(targets, c.attachment(volume, e.Name()))
		}
	}
	for _, t := range targets {
		if err := os.Remove(t); err != nil && !os.IsNotExist(err) {
			return nil, status.Errorf(codes.Internal, "removing the attachment %s: %v", t, err)
		}
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (c *controller) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	volume := req.GetVolumeId()
	if st, err := os.Stat(filepath.Join(c.backingDir, volume)); !plainName.MatchString(volume) || err != nil || !st.IsDir() {
		return nil, status.Errorf(codes.NotFound, "volume %q: no such directory", volume)
	}
	for _, capability := range req.GetVolumeCapabilities() {
		if p := capabilityProblem(capability); p != "" {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume %s: %s", volume, p)}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities(),
	}}, nil
}
