package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// node stages a volume by bind-mounting its directory at the staging path (the block
// kind: by mounting its ext4 image there through a loop device, block.go) and
// publishes it by bind-mounting the staging path into the pod's target path. It runs
// in the node's mount namespace, so its mounts are the node's (and the kubelet's
// rshared root carries them to containerd's view).
//
// With attachRequired false (-attach-required=false: the node part of a driver whose
// CSIDriver says attachRequired: false, which the kubelet stages with no publish
// context) it stages the plain volume directory by a bind mount, with no attach check
// and no view: storage that cannot fence a node, as NFS-backed and hostPath-like
// drivers are. The block kind is not served then (its image is made at ControllerPublish).
type node struct {
	csi.UnimplementedNodeServer
	backingDir     string
	nodeID         string
	attachRequired bool
}

func (n *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.nodeID}, nil
}

func (n *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		rpc(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME),
		rpc(csi.NodeServiceCapability_RPC_EXPAND_VOLUME),
	}}, nil
}

func (n *node) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	volume, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if !plainName.MatchString(volume) || staging == "" || req.GetVolumeCapability() == nil {
		return nil, status.Errorf(codes.InvalidArgument, "staging volume %q at %q: a plain volume id, a staging path and a capability are required", volume, staging)
	}
	if req.GetVolumeCapability().GetMount() == nil {
		return nil, status.Errorf(codes.InvalidArgument, "staging volume %s: only mount access is served", volume)
	}
	source := filepath.Join(n.backingDir, volume)
	if !n.attachRequired {
		// No attach step, so nothing to check and nothing the storage could revoke.
		return n.stageDirectory(volume, source, staging)
	}
	// The attach-detach controller's VolumeAttachment carries ControllerPublish's
	// context to the kubelet, which passes it here: no attach, no stage.
	if got := req.GetPublishContext()[publishContextNode]; got != n.nodeID {
		return nil, status.Errorf(codes.FailedPrecondition, "staging volume %s on node %s: it is attached to %q", volume, n.nodeID, got)
	}
	fs, err := blockKind(req.GetPublishContext())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "staging volume %s: %v", volume, err)
	}
	if fs != "" {
		// The block kind (block.go): the image through this node's view when fenced.
		if view, fenced := req.GetPublishContext()[publishContextView]; fenced {
			source = view
		}
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "staging volume %s: making %s: %v", volume, staging, err)
		}
		if err := stageImage(filepath.Join(source, imageFile), staging, fs); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "staging volume %s on node %s: %v", volume, n.nodeID, err)
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}
	// The fencing mode: the storage mounted this node's own view (fencing.go); staging
	// the backing directory instead would go around its revoke.
	if view, fenced := req.GetPublishContext()[publishContextView]; fenced {
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "staging volume %s: making %s: %v", volume, staging, err)
		}
		if err := moveView(view, staging); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "staging volume %s on node %s: %v", volume, n.nodeID, err)
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}
	return n.stageDirectory(volume, source, staging)
}

// stageDirectory bind-mounts the volume directory source at staging.
func (n *node) stageDirectory(volume, source, staging string) (*csi.NodeStageVolumeResponse, error) {
	if st, err := os.Stat(source); err != nil || !st.IsDir() {
		return nil, status.Errorf(codes.NotFound, "staging volume %s: no directory %s", volume, source)
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "staging volume %s: making %s: %v", volume, staging, err)
	}
	if err := bindMount(source, staging, false); err != nil {
		return nil, status.Errorf(codes.Internal, "staging volume %s: %v", volume, err)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (n *node) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "unstaging: no staging path")
	}
	if err := unmount(req.GetStagingTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "unstaging volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (n *node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	volume, staging, target := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetTargetPath()
	if staging == "" || target == "" || req.GetVolumeCapability().GetMount() == nil {
		return nil, status.Errorf(codes.InvalidArgument, "publishing volume %q: a staging path, a target path and mount access are required", volume)
	}
	if mounted, err := isMountPoint(staging); err != nil || !mounted {
		return nil, status.Errorf(codes.FailedPrecondition, "publishing volume %s: %s is not staged (%v)", volume, staging, err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "publishing volume %s: making %s: %v", volume, target, err)
	}
	if err := bindMount(staging, target, req.GetReadonly()); err != nil {
		return nil, status.Errorf(codes.Internal, "publishing volume %s: %v", volume, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "unpublishing: no target path")
	}
	if err := unmount(target); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublishing volume %s: %v", req.GetVolumeId(), err)
	}
	// The CSI spec: the plugin removes the target path it made.
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return nil, status.Errorf(codes.Internal, "unpublishing volume %s: removing %s: %v", req.GetVolumeId(), target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
