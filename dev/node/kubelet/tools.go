//go:build tools

// Keeps the kubelet, built by ../build.sh, in this module's requirements.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
