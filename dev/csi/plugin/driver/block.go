package main

// The block kind (a volume context's storage.leasehold.dev/block-filesystem: ext4, the
// StorageClass parameter `filesystem: ext4` or a static PV's volumeAttributes): a
// volume is one ext4 file system in an image file, <backing>/<volume>/disk.img, as a
// network disk is one block device (the tests read it back: dev/csi/block-image.ts).
// The controller makes the image (CreateVolume; a static volume's
// at its first ControllerPublish) and grants the node its revocable view of the
// directory holding it (fencing.go); NodeStage attaches a loop device over the view's
// image file (direct I/O, autoclear) in the node and mounts ext4 at the staging path;
// NodeUnstage unmounts it, which detaches the loop device (autoclear).
//
// Why: the kernel's file handles of ext4 (inode and generation; what ganesha's VFS FSAL
// hands NFS clients, name_to_handle_at) are the same on every node's mount of the
// image, where a FUSE view's are its own node ids, other on every mount (a stale file
// handle after a failover). Why direct I/O: every block the node reads or writes then
// passes the view's revoke switch (a buffered loop device would answer reads from the
// view's page cache after a revoke); the node's caching is ext4's, as over a real disk.
// Why autoclear: a crashed node's mounts go with its mount namespace, and so then does
// its loop device, as a dead machine's disk sessions.
//
// Guarantees: createImage never overwrites an image (made under a temporary name,
// renamed into place); stageImage attaches and mounts, or leaves nothing attached.
// Not guaranteed: capacity beyond the image's size (fixed at creation); a node's ext4
// after its revoke keeps what its page cache holds (write(2) may still succeed there;
// its writeback, journal commits, fsync and direct reads fail EIO, then the file system
// goes read-only: errors=remount-ro).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// volumeContextFS is the volume context's (and PV volumeAttributes') key of the kind.
	volumeContextFS = "storage.leasehold.dev/block-filesystem"
	// parameterFS is the StorageClass parameter asking CreateVolume for the block kind.
	parameterFS = "filesystem"
	blockFS     = "ext4"
	// xfsFS is the other file system made: XFS grows online with CAP_SYS_ADMIN, where
	// ext4's online resize needs CAP_SYS_RESOURCE, which these machines do not grant
	// (resize2fs: "Permission denied to resize filesystem", measured 2026-12-07).
	xfsFS     = "xfs"
	imageFile = "disk.img"
	// staticImageBytes is a static volume's image (no capacity is asked for); sparse.
	staticImageBytes = 512 << 20
	minImageBytes    = 32 << 20
)

// blockKind is the file system a volume context asks for ("" for a directory volume);
// an error names a file system this driver cannot make.
func blockKind(volumeContext map[string]string) (string, error) {
	fs := volumeContext[volumeContextFS]
	if fs != "" && fs != blockFS && fs != xfsFS {
		return "", fmt.Errorf("%s=%q: only %s and %s are made", volumeContextFS, fs, blockFS, xfsFS)
	}
	return fs, nil
}

// createImage makes dir/disk.img, a file system fs (ext4 or xfs) of bytes (sparse),
// unless it is there.
func createImage(dir string, bytes int64, fs string) error {
	image := filepath.Join(dir, imageFile)
	if _, err := os.Stat(image); err == nil {
		return nil
	}
	if bytes < minImageBytes {
		bytes = minImageBytes
	}
	tmp := image + ".mkfs"
	_ = os.Remove(tmp)
	var out []byte
	var err error
	if fs == xfsFS {
		// XFS's own minimum is 300 MiB; the image is made at least that large.
		if bytes < 300<<20 {
			bytes = 300 << 20
		}
		if err = os.WriteFile(tmp, nil, 0o600); err == nil {
			err = os.Truncate(tmp, bytes)
		}
		// A protofile gives the root directory mode 0777, as debugfs does for ext4 below.
		proto := tmp + ".proto"
		if err == nil {
			err = os.WriteFile(proto, []byte("/dev/null\n0 0\nd--777 0 0\n$\n"), 0o600)
		}
		if err == nil {
			// -s size=4096: the loop device's logical block size (direct I/O); XFS
			// refuses to mount a file system of smaller sectors on it.
			out, err = exec.Command("mkfs.xfs", "-q", "-f", "-s", "size=4096", "-p", proto, tmp).CombinedOutput()
		}
		_ = os.Remove(proto)
	} else {
		// -e remount-ro: an I/O error never panics the (host's) kernel. -b 4096: the loop
		// device's logical block size (direct I/O); mkfs would pick 1024 for a small image.
		out, err = exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-e", "remount-ro", "-m", "0",
			"-E", "lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0", tmp, fmt.Sprintf("%dk", bytes/1024)).CombinedOutput()
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("making the %s image %s: mkfs: %v: %s", fs, image, err, strings.TrimSpace(string(out)))
	}
	// World-writable root, as the directory kind's: the pods run as non-root.
	if fs != xfsFS {
		if out, err := exec.Command("debugfs", "-w", "-R", "sif / mode 041777", tmp).CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("making the ext4 image %s: debugfs: %v: %s", image, err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.Rename(tmp, image); err != nil {
		return fmt.Errorf("making the %s image %s: %w", fs, image, err)
	}
	return nil
}

// stageImage attaches a loop device over image (direct I/O, autoclear) and mounts its
// file system fs at staging, unless staging is mounted already.
func stageImage(image, staging, fs string) error {
	if mounted, err := isMountPoint(staging); err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	} else if mounted {
		return nil
	}
	backing, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening the image %s: %w", image, err)
	}
	defer backing.Close()
	loop, err := attachLoop(backing)
	if err != nil {
		return fmt.Errorf("attaching a loop device over %s: %w", image, err)
	}
	// NB: held open until mounted: autoclear detaches at the last close.
	defer loop.Close()
	options := "errors=remount-ro"
	if fs == xfsFS {
		options = "" // XFS shuts the file system down on an I/O error by itself.
	}
	if err := unix.Mount(loop.Name(), staging, fs, unix.MS_NODEV|unix.MS_NOSUID, options); err != nil {
		return fmt.Errorf("mounting %s of %s (%s) at %s: %w", fs, image, loop.Name(), staging, err)
	}
	return nil
}

// attachLoop binds a free loop device to backing; another process taking the same free
// device first (EBUSY) is retried, a few times.
func attachLoop(backing *os.File) (*os.File, error) {
	control, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer control.Close()
	var last error
	for try := 0; try < 20; try++ {
		n, err := unix.IoctlRetInt(int(control.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Size: 4096}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		copy(cfg.Info.File_name[:], backing.Name())
		last = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if last == nil {
			return dev, nil
		}
		_ = dev.Close()
		if last != unix.EBUSY {
			return nil, fmt.Errorf("LOOP_CONFIGURE %s: %w", dev.Name(), last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("no free loop device after 20 tries: %w", last)
}
