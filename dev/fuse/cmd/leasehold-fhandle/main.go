// leasehold-fhandle: what an NFS server's VFS FSAL does with file handles, for tests of
// the fencing CSI driver (test/integration/real-node-fencing.ts): a handle taken on one
// node's mount of a volume must open the same file on another node's mount of it.
//
//	leasehold-fhandle get FILE            prints the handle: "<type>:<hex bytes>"
//	leasehold-fhandle read MOUNT HANDLE   opens HANDLE on the file system mounted at
//	                                      MOUNT (open_by_handle_at, O_DIRECT: past the
//	                                      page cache, to the storage) and prints what
//	                                      the file holds
//
// Errors go to stderr as one line naming the call and the errno's name (e.g. EIO,
// ESTALE), exit 1.
package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func fail(call string, err error) {
	name := err.Error()
	if errno, ok := err.(syscall.Errno); ok {
		name = unix.ErrnoName(errno)
	}
	fmt.Fprintf(os.Stderr, "leasehold-fhandle: %s: %s (%v)\n", call, name, err)
	os.Exit(1)
}

func main() {
	switch {
	case len(os.Args) == 3 && os.Args[1] == "get":
		h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, os.Args[2], 0)
		if err != nil {
			fail("name_to_handle_at "+os.Args[2], err)
		}
		fmt.Printf("%d:%s\n", h.Type(), hex.EncodeToString(h.Bytes()))
	case len(os.Args) == 4 && os.Args[1] == "read":
		typ, raw, ok := strings.Cut(os.Args[3], ":")
		t, err := strconv.Atoi(typ)
		b, herr := hex.DecodeString(raw)
		if !ok || err != nil || herr != nil {
			fmt.Fprintf(os.Stderr, "leasehold-fhandle: handle %q: <type>:<hex> expected\n", os.Args[3])
			os.Exit(2)
		}
		mount, err := unix.Open(os.Args[2], unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			fail("open "+os.Args[2], err)
		}
		fd, err := unix.OpenByHandleAt(mount, unix.NewFileHandle(int32(t), b), unix.O_RDONLY|unix.O_DIRECT)
		if err != nil {
			fail("open_by_handle_at", err)
		}
		// O_DIRECT wants an aligned buffer: a page from mmap is.
		buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			fail("mmap", err)
		}
		for off := int64(0); ; {
			n, err := unix.Pread(fd, buf, off)
			if err != nil {
				fail("pread", err)
			}
			if n == 0 {
				return
			}
			os.Stdout.Write(buf[:n])
			off += int64(n)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: leasehold-fhandle get FILE | read MOUNT HANDLE")
		os.Exit(2)
	}
}
