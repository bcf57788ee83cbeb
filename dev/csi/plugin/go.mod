// The testbed's CSI driver (./driver) and its kubelet registrar (./registrar), built
// by ../build.sh. Why they are the project's own and not csi-driver-host-path and
// node-driver-registrar: ../README.md.
module leasehold.dev/csi/plugin

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.13.0
	golang.org/x/sys v0.47.0
	google.golang.org/grpc v1.83.2
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
	k8s.io/kubelet v0.37.0
)

require (
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
)
