// Command httpserve is the real Cluster API lane's workload (test/e2ereal): it
// answers every HTTP request on :8080 with its pod's name and the time it started,
// so that a probe outside the node sees both whether it is served and whether it is
// still the same container.
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	started := time.Now().UTC().Format(time.RFC3339Nano)
	name, _ := os.Hostname()
	srv := &http.Server{
		Addr:              ":8080",
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "%s %s\n", name, started)
		}),
	}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
