package workload

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const kubeconfigYAML = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443"}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func TestRESTConfig(t *testing.T) {
	key := client.ObjectKey{Namespace: "ns", Name: "c1"}
	cfg, err := RESTConfig([]byte(kubeconfigYAML), key, Options{UserAgent: "me", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.0.0.1:6443" || cfg.BearerToken != "abc" {
		t.Errorf("host %q token %q", cfg.Host, cfg.BearerToken)
	}
	if cfg.UserAgent != "me" || cfg.Timeout != 3*time.Second || cfg.QPS != DefaultQPS || cfg.Burst != DefaultBurst {
		t.Errorf("user agent %q, timeout %s, qps %v, burst %d", cfg.UserAgent, cfg.Timeout, cfg.QPS, cfg.Burst)
	}
	if _, err := RESTConfig([]byte("not: [a kubeconfig"), key, Options{}); err == nil {
		t.Error("a broken kubeconfig parsed")
	}
}

func TestConfigureKeepsTheCallersRateAndCopies(t *testing.T) {
	in := &rest.Config{Host: "h", QPS: 7, Burst: 9, UserAgent: "orig"}
	out := Configure(in, Options{})
	if out.QPS != 7 || out.Burst != 9 || out.UserAgent != "orig" {
		t.Errorf("caller's settings lost: %+v", out)
	}
	out = Configure(in, Options{Unthrottled: true, UserAgent: "x"})
	if out.QPS != -1 || out.Burst != 0 || out.UserAgent != "x" {
		t.Errorf("unthrottled: qps %v burst %d ua %q", out.QPS, out.Burst, out.UserAgent)
	}
	if in.QPS != 7 || in.UserAgent != "orig" {
		t.Errorf("Configure changed its input: %+v", in)
	}
}
