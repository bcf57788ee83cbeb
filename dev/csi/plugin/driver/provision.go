package main

// Dynamic provisioning (the external-provisioner calls these): a volume is a directory
// <backing>/<name> with its metadata in <state>/volumes/<name>.json (the capacity asked
// for, recorded and reported, not enforced: a directory has no size); with the
// StorageClass parameter `filesystem: ext4` the directory holds the volume's ext4 image
// of that capacity (block.go), and the volume context says so.
//
// Guarantees: CreateVolume is idempotent for the same name and capacity, refuses the
// same name with a different capacity (AlreadyExists), block access and access modes
// this driver cannot fence (multi-node writers: InvalidArgument naming the volume and
// the mode); DeleteVolume refuses a volume still published to a node
// (FailedPrecondition) and is idempotent for a volume that is gone.
// Not guaranteed: capacity limits, snapshots, cloning, topology.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type volumeMeta struct {
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacityBytes"`
}

// capabilityProblem says why this driver cannot serve a capability, or "".
func capabilityProblem(c *csi.VolumeCapability) string {
	if c.GetBlock() != nil {
		return "block access is not served (mount access only)"
	}
	if c.GetMount() == nil {
		return "no access type (mount access is served)"
	}
	switch m := c.GetAccessMode().GetMode(); m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return ""
	default:
		return fmt.Sprintf("access mode %s is not served (one node at a time, or read-only on many: the fencing grants one writer)", m)
	}
}

// sharedReadOnly reports whether a capability allows views on several nodes at once.
func sharedReadOnly(c *csi.VolumeCapability) bool {
	return c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

func (c *controller) metaPath(name string) string {
	return filepath.Join(c.stateDir, "volumes", name+".json")
}

func (c *controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if !plainName.MatchString(name) {
		return nil, status.Errorf(codes.InvalidArgument, "creating volume %q: the name must be a plain name (%s)", name, plainName)
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "creating volume %s: no volume capability", name)
	}
	for _, capability := range req.GetVolumeCapabilities() {
		if p := capabilityProblem(capability); p != "" {
			return nil, status.Errorf(codes.InvalidArgument, "creating volume %s: %s", name, p)
		}
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Errorf(codes.InvalidArgument, "creating volume %s: a content source (snapshot, clone) is not served", name)
	}
	capacity := req.GetCapacityRange().GetRequiredBytes()
	if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && capacity > limit {
		return nil, status.Errorf(codes.OutOfRange, "creating volume %s: required %d bytes is more than the limit %d", name, capacity, limit)
	}
	if raw, err := os.ReadFile(c.metaPath(name)); err == nil {
		var meta volumeMeta
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, status.Errorf(codes.Internal, "creating volume %s: reading its metadata %s: %v", name, c.metaPath(name), err)
		}
		if meta.CapacityBytes != capacity {
			return nil, status.Errorf(codes.AlreadyExists, "creating volume %s: it exists with %d bytes, not %d", name, meta.CapacityBytes, capacity)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "creating volume %s: %v", name, err)
	}
	fs := req.GetParameters()[parameterFS]
	if fs != "" && fs != blockFS && fs != xfsFS {
		return nil, status.Errorf(codes.InvalidArgument, "creating volume %s: StorageClass parameter %s=%q: only %s or %s (or none: a directory) is made", name, parameterFS, fs, blockFS, xfsFS)
	}
	dir := filepath.Join(c.backingDir, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, status.Errorf(codes.Internal, "creating volume %s: making %s: %v", name, dir, err)
	}
	// World-writable like a fresh file system's root would be for its first user:
	// the pods run as non-root (the chart's securityContexts). NB: MkdirAll's mode
	// goes through the umask.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, status.Errorf(codes.Internal, "creating volume %s: %v", name, err)
	}
	raw, _ := json.Marshal(volumeMeta{Name: name, CapacityBytes: capacity})
	if err := os.MkdirAll(filepath.Dir(c.metaPath(name)), 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating volume %s: %v", name, err)
	}
	if err := os.WriteFile(c.metaPath(name), raw, 0o640); err != nil {
		return nil, status.Errorf(codes.Internal, "creating volume %s: writing its metadata: %v", name, err)
	}
	volumeContext := map[string]string{}
	if fs != "" {
		if err := createImage(dir, capacity, fs); err != nil {
			return nil, status.Errorf(codes.Internal, "creating volume %s: %v", name, err)
		}
		volumeContext[volumeContextFS] = fs
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: name, CapacityBytes: capacity, VolumeContext: volumeContext}}, nil
}

func (c *controller) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	volume := req.GetVolumeId()
	if !plainName.MatchString(volume) {
		return nil, status.Errorf(codes.InvalidArgument, "deleting volume %q: the id must be a plain name", volume)
	}
	if nodes := c.publishedTo(volume); len(nodes) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "deleting volume %s: it is still published to node(s) %v", volume, nodes)
	}
	if err := os.RemoveAll(filepath.Join(c.backingDir, volume)); err != nil {
		return nil, status.Errorf(codes.Internal, "deleting volume %s: %v", volume, err)
	}
	if err := os.Remove(c.metaPath(volume)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "deleting volume %s: removing its metadata: %v", volume, err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// publishedTo lists the nodes volume is recorded attached to.
func (c *controller) publishedTo(volume string) []string {
	entries, _ := os.ReadDir(filepath.Join(c.stateDir, "attachments", volume))
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
