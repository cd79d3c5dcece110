// Command pause is the sandbox container of the real node's pods (cluster.RealNode): it holds
// the pod's namespaces, doing nothing until it is told to stop, as Kubernetes' pause image does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
