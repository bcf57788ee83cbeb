//go:build tools

// Keeps the external-attacher, built by ../build.sh, in this module's requirements.
package tools

import _ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
