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
//
// The second mode is the API server's way into the nodes (its egress selector's
// `cluster` connection, HTTPConnect over a Unix socket):
//
//	leasehold-netns-relay -connect-unix PATH -routes DIR
//
// listens on the Unix socket PATH (made here, mode 0600) and answers each
// "CONNECT ip:port HTTP/1.1" by dialing ip:port in the network namespace named in the
// file DIR/<ip> (a node writes its node IP's file, holding /proc/<pid>/ns/net, and
// removes it at stop), or in the relay's own namespace when DIR has no such file (the
// API server's other `cluster` traffic, e.g. webhooks on host loopback, goes on as
// before). It replies 200 and then passes bytes unchanged, or 502 naming the failure.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "", "TCP address to listen on (host:port)")
	listenNetns := flag.String("listen-netns", "", "network namespace file to listen in (default: this process's)")
	dial := flag.String("dial", "", "TCP address to forward to (host:port)")
	dialNetns := flag.String("dial-netns", "", "network namespace file to dial in (default: this process's)")
	connectUnix := flag.String("connect-unix", "", "Unix socket to serve HTTP CONNECT on (the second mode)")
	routes := flag.String("routes", "", "with -connect-unix: directory of <ip> files naming the netns to dial ip in")
	flag.Parse()
	if *connectUnix != "" {
		if *routes == "" || *listen != "" || *dial != "" {
			fail("-connect-unix takes -routes and neither -listen nor -dial")
		}
		serveConnect(*connectUnix, *routes)
		return
	}
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
	splice(in, in, out.(*net.TCPConn))
}

// halfCloser is a connection whose sending side can be closed alone (TCP, Unix).
type halfCloser interface {
	io.ReadWriter
	CloseWrite() error
}

// splice copies both ways between a (read through r, which may hold bytes already
// buffered from a) and b, half-closing each direction when its sender is done.
func splice(a halfCloser, r io.Reader, b halfCloser) {
	done := make(chan struct{}, 2)
	pipe := func(dst halfCloser, src io.Reader) {
		_, _ = io.Copy(dst, src)
		_ = dst.CloseWrite()
		done <- struct{}{}
	}
	go pipe(b, r)
	go pipe(a, b)
	<-done
	<-done
}

func serveConnect(path, routes string) {
	_ = os.Remove(path) // a socket file left by a killed run
	ln, err := net.Listen("unix", path)
	if err != nil {
		fail(fmt.Sprintf("listening on unix socket %s: %v", path, err))
	}
	if err := os.Chmod(path, 0o600); err != nil {
		fail(fmt.Sprintf("chmod %s: %v", path, err))
	}
	fmt.Fprintf(os.Stderr, "relay: listening on unix socket %s for CONNECT, routes in %s\n", path, routes)
	for {
		conn, err := ln.Accept()
		if err != nil {
			fail(fmt.Sprintf("accepting on %s: %v", path, err))
		}
		go connect(conn.(*net.UnixConn), routes)
	}
}

// connect serves one CONNECT request on in.
func connect(in *net.UnixConn, routes string) {
	defer in.Close()
	br := bufio.NewReader(in)
	req, err := http.ReadRequest(br)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: reading a CONNECT request: %v\n", err)
		return
	}
	reply := func(status string) { fmt.Fprintf(in, "HTTP/1.1 %s\r\n\r\n", status) }
	if req.Method != http.MethodConnect {
		reply("405 Method Not Allowed")
		return
	}
	addr := req.Host
	host, _, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		reply("400 Bad Request")
		fmt.Fprintf(os.Stderr, "relay: CONNECT %q: not ip:port\n", addr)
		return
	}
	netns := ""
	if b, err := os.ReadFile(filepath.Join(routes, host)); err == nil {
		netns = strings.TrimSpace(string(b))
	}
	var out net.Conn
	err = inNetns(netns, func() (err error) {
		out, err = net.Dial("tcp", addr)
		return err
	})
	if err != nil {
		reply("502 Bad Gateway")
		fmt.Fprintf(os.Stderr, "relay: CONNECT %s (netns %q): %v\n", addr, netns, err)
		return
	}
	defer out.Close()
	reply("200 Connection established")
	splice(in, br, out.(*net.TCPConn))
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
