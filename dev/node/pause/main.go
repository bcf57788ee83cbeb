// pause holds a pod sandbox's namespaces: it sleeps until SIGTERM or SIGINT and exits 0.
// As PID 1 of a pod that shares its PID namespace it also reaps orphaned children, as
// Kubernetes' own pause does. It has no dependencies, so the image is this one static
// binary (CGO_ENABLED=0).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
