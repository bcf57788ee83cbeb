package main

// Mounting the view in another mount namespace without entering it (--mount-ns): this
// process opens /dev/fuse and runs itself as a helper under `nsenter --mount`, the fd
// inherited as fd 3; the helper mount(2)s it there and exits. NB: a Go process cannot
// setns(CLONE_NEWNS) once it has threads, hence the helper.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// mountIn mounts a FUSE connection at mountpoint in the mount namespace ns and returns
// the /dev/fuse file to serve it on.
func mountIn(ns, mountpoint string, mo *fuse.MountOptions) (*os.File, error) {
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/fuse: %w", err)
	}
	// What the kernel's FUSE mount understands (fs/fuse/inode.c), as go-fuse's direct mount passes it.
	data := []string{
		"fd=3",
		"rootmode=40000",
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", mo.MaxWrite),
	}
	if mo.AllowOther {
		data = append(data, "allow_other")
	}
	data = append(data, mo.Options...)
	cmd := exec.Command("nsenter", "--mount="+ns, "--", os.Args[0], "__mount", mountpoint, mo.FsName, "fuse."+mo.Name, strings.Join(data, ","))
	cmd.ExtraFiles = []*os.File{dev}
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return dev, nil
}

// helper runs in the target namespace: `__mount MOUNTPOINT SOURCE FSTYPE DATA` (fd 3 is
// the /dev/fuse connection) or `__umount MOUNTPOINT` (MNT_DETACH; not mounted is done).
func helper(op string, args []string) {
	switch {
	case op == "__mount" && len(args) == 4:
		if err := syscall.Mount(args[1], args[0], args[2], syscall.MS_NOSUID|syscall.MS_NODEV, args[3]); err != nil {
			fail("mount %s (%s) at %s: %v", args[1], args[3], args[0], err)
		}
	case op == "__umount" && len(args) == 1:
		if err := syscall.Unmount(args[0], syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			fail("unmount %s: %v", args[0], err)
		}
	default:
		fail("%s %v: unknown helper call", op, args)
	}
}
