//go:build tools

// Keeps the external-resizer, built by ../build.sh, in this module's requirements.
package tools

import _ "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer"
