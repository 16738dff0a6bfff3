// Command pause is the pod sandbox's process in the one-node cluster of
// make e2e (containerd's sandbox_image): it holds the pod's namespaces
// open and does nothing until it is told to stop, as Kubernetes' pause
// does. As PID 1 of a pod that shares its process namespace it also reaps
// the orphans that are reparented to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: pause (waits for SIGINT or SIGTERM)")
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
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
