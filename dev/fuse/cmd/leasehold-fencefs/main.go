// leasehold-fencefs mounts a revocable passthrough view of one directory (the simulated
// storage's view of one volume for one node; dev/sim/storage/).
//
//	leasehold-fencefs --backing DIR --mountpoint DIR
//
// Protocol on stdin/stdout, one line each: it prints "ready" once mounted; on "revoke"
// it cuts the view (fencefs.Revocable.Revoke: executing requests drain, every later one
// fails with EIO) and prints "revoked". On stdin EOF (its parent closed it or died),
// SIGTERM or SIGINT it detaches the mount (MNT_DETACH: processes holding files keep
// getting answers, EIO once revoked) and exits when the kernel has released it, or 2 s
// later. A parent-death signal (SIGTERM) ties it to the process that started it.
// Errors go to stderr as one line, exit 1.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/signal"
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
	flag.Parse()
	if *backing == "" || *mountpoint == "" {
		fail("--backing and --mountpoint are required")
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
	server, err := fuse.NewServer(view, *mountpoint, &opts.MountOptions)
	if err != nil {
		fail("mount %s: %v", *mountpoint, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		fail("mount %s: %v", *mountpoint, err)
	}
	fmt.Println("ready")

	done := make(chan struct{})
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case "revoke":
				view.Revoke()
				fmt.Println("revoked")
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
