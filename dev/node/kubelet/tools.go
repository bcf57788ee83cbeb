//go:build tools

// Keeps the kubelet and kube-proxy, built by ../build.sh, in this module's requirements.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
