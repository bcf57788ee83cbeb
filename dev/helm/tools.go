//go:build tools

// Keeps the helm command in this module's requirements.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
