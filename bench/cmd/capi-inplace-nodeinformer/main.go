// Command capi-inplace-nodeinformer is the bench's baseline for the agent's idle
// footprint: a bare client-go program that watches one Node through a shared
// informer, as the agent does, and nothing else. `make bench` runs it beside
// capi-inplace-agent against the same API server and reports both.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "Path to the kubeconfig.")
	node := flag.String("node-name", "", "Name of the Node to watch.")
	flag.Parse()
	if err := run(*kubeconfig, *node); err != nil {
		fmt.Fprintln(os.Stderr, "nodeinformer:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, node string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	inf := f.Core().V1().Nodes().Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("node informer did not sync")
	}
	fmt.Println("synced")
	<-ctx.Done()
	f.Shutdown()
	return nil
}
