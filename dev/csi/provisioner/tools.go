//go:build tools

// Keeps the external-provisioner, built by ../build.sh, in this module's requirements.
package tools

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
