// leasehold-csi-registrar: registers a CSI driver's node socket with the kubelet, as
// node-driver-registrar does: it asks the driver its name (Identity.GetPluginInfo),
// then serves the kubelet's plugin registration API (pluginregistration/v1) on
// <-registration-dir>/<name>-reg.sock, where the kubelet's plugin watcher finds it and
// learns the driver's endpoint; the kubelet then calls NodeGetInfo and writes the
// CSINode.
//
// Guarantees: the socket exists only once the driver answered; a registration the
// kubelet reports as failed ends this process with status 1 (the kubelet is told
// again on the next start). SIGTERM removes the socket.
// Not guaranteed: the kubelet's unregistration of a driver that went away (the
// kubelet notices the socket's removal itself).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func main() {
	var (
		driverSocket    = flag.String("csi-address", "", "the driver's node socket, as the kubelet must dial it (required)")
		registrationDir = flag.String("registration-dir", "", "the kubelet's plugins_registry directory (required)")
		wait            = flag.Duration("driver-timeout", 30*time.Second, "how long to wait for the driver to answer")
	)
	flag.Parse()
	if err := run(*driverSocket, *registrationDir, *wait); err != nil {
		log.Fatalf("leasehold-csi-registrar: %v", err)
	}
}

func run(driverSocket, registrationDir string, wait time.Duration) error {
	if driverSocket == "" || registrationDir == "" {
		return fmt.Errorf("-csi-address and -registration-dir are required")
	}
	name, err := driverName(driverSocket, wait)
	if err != nil {
		return err
	}
	socket := filepath.Join(registrationDir, name+"-reg.sock")
	if err := os.MkdirAll(registrationDir, 0o750); err != nil {
		return fmt.Errorf("making %s: %w", registrationDir, err)
	}
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing a stale socket %s: %w", socket, err)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", socket, err)
	}
	server := grpc.NewServer()
	failed := make(chan error, 1)
	registration.RegisterRegistrationServer(server, &registrar{name: name, endpoint: driverSocket, failed: failed})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var result error
	go func() {
		select {
		case <-stop:
		case result = <-failed:
		}
		server.Stop()
	}()
	log.Printf("leasehold-csi-registrar: %s (endpoint %s) registering on %s", name, driverSocket, socket)
	if err := server.Serve(listener); err != nil {
		return fmt.Errorf("serving %s: %w", socket, err)
	}
	_ = os.Remove(socket)
	return result
}

// driverName asks the driver its name, retrying until it answers or wait passes.
func driverName(socket string, wait time.Duration) (string, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("dialing the driver at %s: %w", socket, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil && info.GetName() != "" {
			return info.GetName(), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the driver at %s did not tell its name within %s: %v", socket, wait, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type registrar struct {
	registration.UnimplementedRegistrationServer
	name, endpoint string
	failed         chan<- error
}

func (r *registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, status *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if status.GetPluginRegistered() {
		log.Printf("leasehold-csi-registrar: the kubelet registered %s", r.name)
	} else {
		r.failed <- fmt.Errorf("the kubelet refused %s: %s", r.name, status.GetError())
	}
	return &registration.RegistrationStatusResponse{}, nil
}
