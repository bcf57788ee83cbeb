// leasehold-fencefs mounts a revocable passthrough view of one directory (the fencing
// CSI driver's view of one volume for one node; dev/csi/).
//
//	leasehold-fencefs --backing DIR --mountpoint DIR [--ext4-image FILE --fs-mountpoint DIR]
//	leasehold-fencefs --backing DIR --mountpoint DIR --mount-ns /proc/PID/ns/mnt
//
// With --mount-ns (the testbed CSI driver's views, dev/csi/plugin/driver/fencing.go) the
// mount is made in that mount namespace only, while this process stays in its own: it
// opens /dev/fuse, and a helper (this binary, `__mount`, run under nsenter --mount with
// the fd inherited) mounts it there; this process then serves the fd (go-fuse's
// /dev/fd/N mountpoint). So the server holds no reference to that namespace: when the
// namespace goes (every process of a crashed node dead), its mounts go, the kernel ends
// the FUSE connection and this process exits, as a dead machine's storage session ends.
// At shutdown it detaches the mount there (`__umount` under nsenter), when the
// namespace is still there.
//
// With --ext4-image, FILE (a name in the backing directory holding an ext4 file system)
// is then mounted at --fs-mountpoint through the view: `mount -o loop` (a loop device
// with autoclear, whose backing file is FILE in the view), so every block the file
// system reads or writes passes the revoke switch, as a node's I/O to a network disk
// passes the storage's. Mount options: errors=remount-ro (never panic: the kernel is
// the host's), nodev, nosuid. The file system stays mounted after a revoke (answering
// errors, as a fenced node keeps its dead disk) until shutdown, which detaches it
// (MNT_DETACH) before the view; the loop device goes when the kernel releases it.
// Protocol on stdin/stdout, one line each: it prints "ready" once mounted; on "revoke"
// it cuts the view (fencefs.Revocable.Revoke: executing requests drain, every later one
// fails with EIO) and prints "revoked"; on "stats" it prints "stats " and the view's
// fencefs.Stats as JSON; it prints that line once more as its last before it exits
// (also when its mount went with its node's namespace), so its parent keeps what the
// view served after it is gone. On stdin EOF (its parent closed it or died),
// SIGTERM or SIGINT it detaches the mount (MNT_DETACH: processes holding files keep
// getting answers, EIO once revoked) and exits when the kernel has released it, or 2 s
// later. A parent-death signal (SIGTERM) ties it to the process that started it.
// Errors go to stderr as one line, exit 1.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"leasehold.dev/fencefs"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "leasehold-fencefs: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	backing := flag.String("backing", "", "directory whose contents the view shows")
	mountpoint := flag.String("mountpoint", "", "empty directory to mount the view on")
	image := flag.String("ext4-image", "", "file in the backing directory holding an ext4 file system to mount through the view")
	fsMountpoint := flag.String("fs-mountpoint", "", "empty directory to mount --ext4-image on")
	mountNs := flag.String("mount-ns", "", "mount the view in this mount namespace (/proc/PID/ns/mnt), serving it from outside")
	if len(os.Args) > 1 && (os.Args[1] == "__mount" || os.Args[1] == "__umount") {
		helper(os.Args[1], os.Args[2:])
		return
	}
	flag.Parse()
	if *backing == "" || *mountpoint == "" {
		fail("--backing and --mountpoint are required")
	}
	if (*image == "") != (*fsMountpoint == "") {
		fail("--ext4-image and --fs-mountpoint go together")
	}
	if *mountNs != "" && *image != "" {
		fail("--mount-ns and --ext4-image do not go together (the node mounts the image: NodeStage)")
	}
	if *image != "" && (filepath.Base(*image) != *image || *image == "." || *image == "..") {
		fail("--ext4-image %q: a file name in the backing directory, not a path", *image)
	}
	const prSetPdeathsig = 1
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetPdeathsig, uintptr(syscall.SIGTERM), 0); errno != 0 {
		fail("prctl(PR_SET_PDEATHSIG): %v", errno)
	}
	if os.Getppid() == 1 {
		fail("parent already gone")
	}
	root, err := fs.NewLoopbackRoot(*backing)
	if err != nil {
		fail("backing %s: %v", *backing, err)
	}
	// Short caches: metadata a revoked node had cached is of no use to it once every
	// request fails; 1 s keeps lookups cheap while running.
	second := time.Second
	opts := &fs.Options{EntryTimeout: &second, AttrTimeout: &second}
	opts.MountOptions = fuse.MountOptions{
		AllowOther:  true,
		FsName:      *backing,
		Name:        "leasehold-fencefs",
		DirectMount: true,
		Options:     []string{"default_permissions"},
		MaxWrite:    1 << 20,
		// NB: kernel passthrough would send reads and writes straight to the backing
		// file, past the revoke switch.
		DisabledCapabilities: fuse.CAP_PASSTHROUGH,
	}
	view := fencefs.NewRevocable(fs.NewNodeFS(root, opts))
	serveAt := *mountpoint
	var devFuse *os.File // NB: kept referenced while served (a collected *os.File closes its fd)
	if *mountNs != "" {
		devFuse, err = mountIn(*mountNs, *mountpoint, &opts.MountOptions)
		if err != nil {
			fail("mount %s in %s: %v", *mountpoint, *mountNs, err)
		}
		serveAt = fmt.Sprintf("/dev/fd/%d", devFuse.Fd())
		opts.MountOptions.DirectMount = false
	}
	server, err := fuse.NewServer(view, serveAt, &opts.MountOptions)
	if err != nil {
		fail("mount %s: %v", *mountpoint, err)
	}
	served := make(chan struct{})
	go func() { server.Serve(); close(served) }()
	if err := server.WaitMount(); err != nil {
		fail("mount %s: %v", *mountpoint, err)
	}
	if *image != "" {
		src := filepath.Join(*mountpoint, *image)
		out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,errors=remount-ro,nodev,nosuid", src, *fsMountpoint).CombinedOutput()
		if err != nil {
			_ = syscall.Unmount(*mountpoint, syscall.MNT_DETACH)
			fail("mount the ext4 file system %s at %s: %v: %s", src, *fsMountpoint, err, out)
		}
	}
	fmt.Println("ready")

	// The view's last stats, before every exit below (its parent keeps them).
	defer func() {
		b, _ := json.Marshal(view.Stats())
		fmt.Printf("stats %s\n", b)
	}()
	done := make(chan struct{})
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case "revoke":
				view.Revoke()
				fmt.Println("revoked")
			case "stats":
				b, _ := json.Marshal(view.Stats())
				fmt.Printf("stats %s\n", b)
			default:
				fmt.Fprintf(os.Stderr, "leasehold-fencefs: unknown command %q\n", in.Text())
			}
		}
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	case <-served:
		// The mount is gone (its namespace died with its node): nothing left to detach.
		return
	}
	if *mountNs != "" {
		if _, err := os.Stat(*mountNs); err == nil {
			out, err := exec.Command("nsenter", "--mount="+*mountNs, "--", os.Args[0], "__umount", *mountpoint).CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "leasehold-fencefs: unmount %s in %s: %v: %s\n", *mountpoint, *mountNs, err, out)
			}
		}
		select {
		case <-served:
		case <-time.After(2 * time.Second):
		}
		_ = devFuse.Close()
		return
	}
	// The file system first: its loop device holds the image open through the view.
	if *fsMountpoint != "" {
		if err := syscall.Unmount(*fsMountpoint, syscall.MNT_DETACH); err != nil {
			fmt.Fprintf(os.Stderr, "leasehold-fencefs: unmount %s: %v\n", *fsMountpoint, err)
		}
	}
	if err := syscall.Unmount(*mountpoint, syscall.MNT_DETACH); err != nil {
		fmt.Fprintf(os.Stderr, "leasehold-fencefs: unmount %s: %v\n", *mountpoint, err)
	}
	exited := make(chan struct{})
	go func() { server.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
	}
}
