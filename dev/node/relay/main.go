// leasehold-netns-relay listens on a TCP address in one network namespace and forwards
// each connection to a TCP address in another, so that a node's network namespace and
// the host's loopback reach each other without any interface, route or firewall rule
// in the host namespace.
//
//	leasehold-netns-relay -listen 127.0.0.1:6443 -listen-netns /proc/PID/ns/net \
//	    -dial 127.0.0.1:6443 [-dial-netns PATH]
//
// A namespace flag left out means the relay's own (the host's) namespace. The
// listening socket is made on a thread moved into the namespace with setns(2) and
// stays in that namespace; so is each dialing socket. Bytes pass unchanged (TLS goes
// end to end), each direction is half-closed when its sender is done. It prints
// "relay: listening" on stderr once the socket is open and runs until killed.
//
// NB: the open listening socket keeps the listen namespace alive: stop the relay
// before judging that a node's namespaces are gone.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "", "TCP address to listen on (host:port)")
	listenNetns := flag.String("listen-netns", "", "network namespace file to listen in (default: this process's)")
	dial := flag.String("dial", "", "TCP address to forward to (host:port)")
	dialNetns := flag.String("dial-netns", "", "network namespace file to dial in (default: this process's)")
	flag.Parse()
	if *listen == "" || *dial == "" {
		fail("both -listen and -dial are required")
	}
	var ln net.Listener
	err := inNetns(*listenNetns, func() (err error) {
		ln, err = net.Listen("tcp", *listen)
		return err
	})
	if err != nil {
		fail(fmt.Sprintf("listening on %s (netns %q): %v", *listen, *listenNetns, err))
	}
	fmt.Fprintf(os.Stderr, "relay: listening on %s (netns %q), forwarding to %s (netns %q)\n", *listen, *listenNetns, *dial, *dialNetns)
	for {
		conn, err := ln.Accept()
		if err != nil {
			fail(fmt.Sprintf("accepting on %s: %v", *listen, err))
		}
		go forward(conn.(*net.TCPConn), *dial, *dialNetns)
	}
}

func forward(in *net.TCPConn, addr, netns string) {
	defer in.Close()
	var out net.Conn
	err := inNetns(netns, func() (err error) {
		out, err = net.Dial("tcp", addr)
		return err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: dialing %s (netns %q) for %s: %v\n", addr, netns, in.RemoteAddr(), err)
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src *net.TCPConn) {
		_, _ = io.Copy(dst, src)
		_ = dst.CloseWrite()
		done <- struct{}{}
	}
	go pipe(out.(*net.TCPConn), in)
	go pipe(in, out.(*net.TCPConn))
	<-done
	<-done
}

// inNetns runs fn on an OS thread moved into the network namespace at path ("" runs
// it where we are). Sockets made by fn belong to that namespace for their lifetime.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	runtime.LockOSThread()
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer own.Close()
	target, err := os.Open(path)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := setns(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", path, err)
	}
	fnErr := fn()
	if err := setns(own); err != nil {
		// NB: the thread stays locked, so Go ends it with this goroutine rather than
		// reuse a thread left in the wrong namespace.
		return fmt.Errorf("setns back from %s: %w", path, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "relay: "+msg)
	os.Exit(1)
}
