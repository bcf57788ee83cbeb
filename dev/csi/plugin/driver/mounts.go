package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// isMountPoint reports whether path is a mount point in this mount namespace
// (/proc/self/mountinfo), so that stage and publish are idempotent.
func isMountPoint(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	want := filepath.Clean(path)
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) > 4 && unescapeOctal(fields[4]) == want {
			return true, nil
		}
	}
	return false, scanner.Err()
}

// unescapeOctal undoes mountinfo's \NNN escapes (space, tab, newline, backslash).
func unescapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// bindMount mounts source at target (read-only when asked) unless target is already
// a mount point.
func bindMount(source, target string, readonly bool) error {
	if mounted, err := isMountPoint(target); err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	} else if mounted {
		return nil
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s at %s: %w", source, target, err)
	}
	if readonly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return fmt.Errorf("remounting %s read-only: %w", target, err)
		}
	}
	return nil
}

// unmount unmounts path when it is a mount point; a missing path is already unmounted.
func unmount(path string) error {
	mounted, err := isMountPoint(path)
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	if !mounted {
		return nil
	}
	if err := unix.Unmount(path, 0); err != nil {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return nil
}

// moveView moves the view mounted at view onto staging (MS_MOVE) unless staging is
// already a mount point. NB: a move, not a bind: the kubelet's UnmountDevice refuses
// a staging path whose mount has another reference (mount-utils GetMountRefs: the same
// device and root elsewhere), which the view's own mount point would be; moved, the
// storage's FUSE connection (and its revoke) is unchanged, and the view's mount point
// is an empty directory again.
func moveView(view, staging string) error {
	if mounted, err := isMountPoint(staging); err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	} else if mounted {
		return nil
	}
	if mounted, err := isMountPoint(view); err != nil || !mounted {
		return fmt.Errorf("its view %s is not mounted here (%v)", view, err)
	}
	if err := unix.Mount(view, staging, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving the view %s to %s: %w", view, staging, err)
	}
	return nil
}
