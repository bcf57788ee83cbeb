package main

// Volume expansion (the real external-resizer calls ControllerExpandVolume; the
// kubelet of the node that has the volume staged calls NodeExpandVolume while it is
// mounted): the block kind's image grows (sparse), then the node's file system grows
// online over its loop device, under whatever uses it: xfs_growfs for XFS, resize2fs
// for ext4 (which needs CAP_SYS_RESOURCE: not on these machines, so the expansion
// tests use XFS). A directory volume has nothing to grow
// (its capacity is recorded, not enforced).
//
// Guarantees: ControllerExpandVolume never shrinks and is idempotent (an image already
// that large is left alone); NodeExpandVolume re-reads the loop device's size
// (LOOP_SET_CAPACITY), waits until the loop device is as large as asked (the fenced
// view's size comes through FUSE, whose attributes may lag), then runs resize2fs, and
// answers the file system's new size as statfs gives it.
// Not guaranteed: shrinking; expansion of a volume staged nowhere (the kubelet calls
// NodeExpandVolume at the next stage, as the CSI spec has it).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (c *controller) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	volume := req.GetVolumeId()
	if !plainName.MatchString(volume) {
		return nil, status.Errorf(codes.InvalidArgument, "expanding volume %q: the id must be a plain name", volume)
	}
	want := req.GetCapacityRange().GetRequiredBytes()
	if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && want > limit {
		return nil, status.Errorf(codes.OutOfRange, "expanding volume %s: required %d bytes is more than the limit %d", volume, want, limit)
	}
	dir := filepath.Join(c.backingDir, volume)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, status.Errorf(codes.NotFound, "expanding volume %s: no directory %s", volume, dir)
	}
	image := filepath.Join(dir, imageFile)
	block := false
	size := want
	if st, err := os.Stat(image); err == nil {
		block = true
		if st.Size() < want {
			if err := os.Truncate(image, want); err != nil {
				return nil, status.Errorf(codes.Internal, "expanding volume %s: growing %s to %d bytes: %v", volume, image, want, err)
			}
		} else {
			size = st.Size()
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "expanding volume %s: %v", volume, err)
	}
	if raw, err := os.ReadFile(c.metaPath(volume)); err == nil {
		var meta volumeMeta
		if json.Unmarshal(raw, &meta) == nil && meta.CapacityBytes < size {
			meta.CapacityBytes = size
			updated, _ := json.Marshal(meta)
			if err := os.WriteFile(c.metaPath(volume), updated, 0o640); err != nil {
				return nil, status.Errorf(codes.Internal, "expanding volume %s: writing its metadata: %v", volume, err)
			}
		}
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: block}, nil
}

func (n *node) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	volume := req.GetVolumeId()
	path := req.GetStagingTargetPath()
	if path == "" {
		path = req.GetVolumePath()
	}
	if !plainName.MatchString(volume) || path == "" {
		return nil, status.Errorf(codes.InvalidArgument, "expanding volume %q on node %s: a plain volume id and a staging or volume path are required", volume, n.nodeID)
	}
	want := req.GetCapacityRange().GetRequiredBytes()
	source, fstype, err := mountSource(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "expanding volume %s on node %s: %v", volume, n.nodeID, err)
	}
	if (fstype != blockFS && fstype != xfsFS) || !strings.HasPrefix(source, "/dev/loop") {
		// A directory volume: nothing to grow.
		return &csi.NodeExpandVolumeResponse{CapacityBytes: want}, nil
	}
	if err := refreshLoopSize(source, want); err != nil {
		return nil, status.Errorf(codes.Internal, "expanding volume %s on node %s: %v", volume, n.nodeID, err)
	}
	// NB: ext4 grows online only with CAP_SYS_RESOURCE (EXT4_IOC_RESIZE_FS), which these
	// machines do not grant; XFS with CAP_SYS_ADMIN (XFS_IOC_FSGROWFSDATA).
	grow := exec.Command("resize2fs", source)
	if fstype == xfsFS {
		grow = exec.Command("xfs_growfs", path)
	}
	if out, err := grow.CombinedOutput(); err != nil {
		return nil, status.Errorf(codes.Internal, "expanding volume %s on node %s: %s: %v: %s", volume, n.nodeID, strings.Join(grow.Args, " "), err, strings.TrimSpace(string(out)))
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nil, status.Errorf(codes.Internal, "expanding volume %s on node %s: statfs %s: %v", volume, n.nodeID, path, err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: int64(fs.Blocks) * fs.Bsize}, nil
}

// mountSource is the device and file system type mounted at path (this mount namespace).
func mountSource(path string) (string, string, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	want := filepath.Clean(path)
	for _, line := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 10 || unescapeOctal(fields[4]) != want {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				return fields[i+2], fields[i+1], nil
			}
		}
	}
	return "", "", fmt.Errorf("nothing is mounted at %s", path)
}

// refreshLoopSize has the loop device re-read its backing file's size until it is at
// least want bytes (the fenced view's size may come through FUSE a moment late).
func refreshLoopSize(device string, want int64) error {
	dev, err := os.OpenFile(device, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	var size uint64
	for try := 0; try < 20; try++ {
		if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
			return fmt.Errorf("LOOP_SET_CAPACITY on %s: %w", device, err)
		}
		// The device's size in 512-byte sectors (sysfs is the host's: loop devices are global).
		raw, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(device), "size"))
		if err != nil {
			return fmt.Errorf("reading the size of %s: %w", device, err)
		}
		sectors, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return fmt.Errorf("reading the size of %s: %q: %w", device, raw, err)
		}
		size = sectors * 512
		if int64(size) >= want {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s is %d bytes after 5 s, not the %d asked: its backing file did not grow", device, size, want)
}
