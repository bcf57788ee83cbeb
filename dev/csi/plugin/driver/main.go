// leasehold-csi-hostdir: a CSI driver whose volumes are directories under one backing
// directory (-backing-dir/<volume handle>), run in two parts as a cluster runs a driver:
//
//	-mode=controller  Identity + Controller (Create/DeleteVolume, ControllerPublish/
//	                  Unpublish), next to the control plane; the external-provisioner
//	                  and the external-attacher call it.
//	-mode=node        Identity + Node (NodeStage/Unstage, NodePublish/Unpublish), on a
//	                  node, in its mount namespace; the kubelet calls it.
//
// Guarantees: ControllerPublishVolume records the attachment (a file
// -state-dir/attachments/<volume>/<node>) and answers only for an existing volume
// directory; the publish context it returns carries attachedNode, and NodeStageVolume
// refuses a volume whose publish context does not name this node, so a volume is
// never staged on a node it was not attached to. Stage bind-mounts the volume
// directory (with -fencefs: moves the node's own revocable view, fencing.go) at the
// staging path, publish bind-mounts the staging path at the target path (read-only when
// asked); unpublish and unstage unmount and remove what they made. CreateVolume and
// DeleteVolume make and remove a volume's directory (provision.go). Every call is
// idempotent, as the CSI spec asks; errors are gRPC status errors naming the volume
// and the node.
// With -mode=node -attach-required=false (the testbed's attach-less driver, whose
// CSIDriver says attachRequired: false) stage bind-mounts the plain directory with no
// attach check: storage that cannot fence. With -fencefs and -views-endpoint the
// controller also answers GET /views on that unix socket: every view's fencefs stats
// (fencing.go report), what each node wrote through its view and when.
// Not guaranteed: capacity limits (recorded, not enforced), block volumes, snapshots,
// topology; without -fencefs, fencing: a node whose volume was unpublished keeps
// writing until its own unmount.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

func main() {
	var (
		endpoint   = flag.String("endpoint", "", "unix socket path to serve CSI on (required)")
		mode       = flag.String("mode", "", "controller or node (required)")
		name       = flag.String("drivername", "hostdir.csi.leasehold.dev", "the CSI driver's name")
		backingDir = flag.String("backing-dir", "", "directory holding one directory per volume (required)")
		stateDir   = flag.String("state-dir", "", "controller: where attachments are recorded (required with -mode=controller)")
		nodeID     = flag.String("node-id", "", "node: this node's id, as the kubelet reports it (required with -mode=node)")
		fencefs    = flag.String("fencefs", "", "controller: the leasehold-fencefs binary; set, a node reaches a volume only through its revocable view (fencing.go)")
		attach     = flag.Bool("attach-required", true, "node: false for a driver whose CSIDriver says attachRequired: false (stage the plain directory, no attach check)")
		views      = flag.String("views-endpoint", "", "controller with -fencefs: a unix socket serving GET /views, every view's fencefs stats (fencing.go report)")
	)
	flag.Parse()
	if err := run(*endpoint, *mode, *name, *backingDir, *stateDir, *nodeID, *fencefs, *views, *attach); err != nil {
		log.Fatalf("leasehold-csi-hostdir: %v", err)
	}
}

func run(endpoint, mode, name, backingDir, stateDir, nodeID, fencefs, views string, attachRequired bool) error {
	if endpoint == "" || backingDir == "" {
		return fmt.Errorf("-endpoint and -backing-dir are required")
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	switch mode {
	case "controller":
		if stateDir == "" {
			return fmt.Errorf("-state-dir is required with -mode=controller")
		}
		csi.RegisterIdentityServer(server, &identity{name: name, controller: true})
		ctl := &controller{backingDir: backingDir, stateDir: stateDir}
		if fencefs != "" {
			ctl.fence = newFencing(fencefs, backingDir, stateDir)
			defer ctl.fence.closeAll()
			if views != "" {
				stopViews, err := serveViews(views, ctl.fence)
				if err != nil {
					return err
				}
				defer stopViews()
			}
		} else if views != "" {
			return fmt.Errorf("-views-endpoint needs -fencefs (only the fencing mode has views)")
		}
		csi.RegisterControllerServer(server, ctl)
	case "node":
		if nodeID == "" {
			return fmt.Errorf("-node-id is required with -mode=node")
		}
		csi.RegisterIdentityServer(server, &identity{name: name})
		csi.RegisterNodeServer(server, &node{backingDir: backingDir, nodeID: nodeID, attachRequired: attachRequired})
	default:
		return fmt.Errorf("-mode must be controller or node, not %q", mode)
	}
	if err := os.MkdirAll(filepath.Dir(endpoint), 0o750); err != nil {
		return fmt.Errorf("making the socket's directory: %w", err)
	}
	if err := os.Remove(endpoint); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing a stale socket %s: %w", endpoint, err)
	}
	listener, err := net.Listen("unix", endpoint)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", endpoint, err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("leasehold-csi-hostdir: %s %s serving on %s", name, mode, endpoint)
	if err := server.Serve(listener); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	_ = os.Remove(endpoint) // the listener's close removes it too; a leftover is harmless
	return nil
}

// serveViews answers GET /views on the unix socket path with fencing.report as JSON;
// the returned func closes the socket.
func serveViews(path string, f *fencing) (func(), error) {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("removing a stale socket %s: %w", path, err)
	}
	listener, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /views", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.report())
	})
	go func() { _ = http.Serve(listener, mux) }()
	return func() { _ = listener.Close() }, nil
}

// logCalls logs each CSI call and its outcome: the testbed's logs show the attach
// and mount sequence.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		log.Printf("%s: %v", info.FullMethod, err)
	} else {
		log.Printf("%s: ok %v", info.FullMethod, req)
	}
	return resp, err
}
