// Command pause is the real-node lane's pod sandbox image: it sleeps until
// SIGINT or SIGTERM, and exits 0 on -v as kubeadm's upgrade health-check Job
// expects of registry.k8s.io/pause.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (capi-inplace real-node lane)")
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
