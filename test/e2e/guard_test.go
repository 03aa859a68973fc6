//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// guardLabel selects the namespaces of the guard scenario for the guard's webhook
// registration, so that it never touches another scenario of the shared stack.
const guardLabel = "e2e.capi-inplace.dev/guard"

var guardWebhook sync.Once

// registerGuardWebhook registers our extension's in-place-only guard with the stack's
// API server, as config/webhook does, after checking that the extension serves it.
func registerGuardWebhook(ctx context.Context, t *testing.T, stack *localstack.Stack, ext *localstack.Extension) {
	t.Helper()
	var err error
	guardWebhook.Do(func() {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", ext.Port, guard.WebhookPath)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ext.Cert.CAPEM)
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		resp, perr := hc.Post(url, "application/json", bytes.NewReader([]byte(`{}`)))
		if perr != nil {
			err = fmt.Errorf("probe %s: %w", url, perr)
			return
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("the extension does not serve %s (HTTP 404)", guard.WebhookPath)
			return
		}
		hook := guard.ValidatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ext.Cert.CAPEM})
		hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{guardLabel: "true"}}
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-guard"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{hook},
		}
		if cerr := stack.Client.Create(ctx, cfg); cerr != nil && !apierrors.IsAlreadyExists(cerr) {
			err = fmt.Errorf("create ValidatingWebhookConfiguration: %w", cerr)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGuardRefusesReplacingChanges: with the in-place-only guard registered as
// config/webhook does, a plain cluster (1 control-plane Machine, 1 worker) and a
// ClusterClass cluster (3 control-plane Machines) get changes that would make Cluster API replace Machines: a
// bootstrap-only field on the KubeadmControlPlane; a MachineDeployment pointing at a
// template that does not exist; a Cluster.spec.topology variable whose ClusterClass
// patch moves a file to another path (the old file would have to be removed). Each
// write is refused by the real API server with the guard's reason (the field,
// "in-place"), the refused Cluster is unchanged, and no Machine is created or deleted
// (watched). A topology write the planner allows (the file's content) is admitted,
// and so is the topology controller's KubeadmControlPlane write that follows. Then the
// allow-replace annotation lets one MachineDeployment change through (one minor up
// with maxUnavailable 0, a surge), recorded in an Event, and the same stored value
// does not admit a second one. No rollout is awaited.
func TestGuardRefusesReplacingChanges(t *testing.T) {
	t.Parallel()
	ext := ourExtension(t)
	s := newScenario(t, "guard", extOurs)
	registerGuardWebhook(s.ctx, t, s.stack, ext)
	if err := s.stack.CreateNamespace(s.ctx, s.ns, map[string]string{guardLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	// A ClusterClass cluster beside the plain one (created together, so the scenario
	// waits once): its topology writes are judged at the Cluster write, from the
	// desired state Cluster API's topology code computes (ClusterClass patches and
	// variables). Its version is not the write used: Cluster API's own webhook refuses a
	// version two minors up before the guard is asked.
	const plain, class = "gplain", "gclass"
	if err := s.stack.CreateClusterClass(s.ctx, s.ns, "inplace"); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []localstack.ClusterSpec{
		{Namespace: s.ns, Name: plain, Version: fromVersion, ControlPlaneReplicas: 1, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
			Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}}},
		// Three control-plane Machines: the ClusterClass rolls out with maxSurge 0,
		// which KCP's webhook allows only from 3 replicas; no workers.
		{Namespace: s.ns, Name: class, Class: "inplace", Version: fromVersion, ControlPlaneReplicas: 3, WorkerReplicas: 0,
			Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}}},
	} {
		if err := s.stack.CreateCluster(s.ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	s.waitClusterReady(plain, 2)
	s.waitClusterReady(class, 3)
	watch := s.watchMachines()

	// refused makes the write and expects the guard's refusal naming says.
	refused := func(what string, write func() error, says ...string) {
		t.Helper()
		err := write()
		if err == nil {
			t.Fatalf("%s: the guard let the write through", what)
		}
		msg := err.Error()
		for _, want := range append([]string{"capi-inplace guard", "instead of updating them in-place"}, says...) {
			if !strings.Contains(msg, want) {
				t.Fatalf("%s: refusal does not say %q:\n%s", what, want, msg)
			}
		}
		s.logf("EVIDENCE %s refused: %s", what, msg)
	}

	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: plain + "-control-plane"}, kcp); err != nil {
		t.Fatal(err)
	}
	refused("plain: KubeadmControlPlane preKubeadmCommands", func() error {
		base := kcp.DeepCopy()
		kcp.Spec.KubeadmConfigSpec.PreKubeadmCommands = []string{"echo guarded"}
		return s.stack.Client.Patch(s.ctx, kcp, client.MergeFrom(base))
	}, "preKubeadmCommands")

	md := &clusterv1.MachineDeployment{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: plain + "-md-0"}, md); err != nil {
		t.Fatal(err)
	}
	refused("plain: MachineDeployment infrastructure template that does not exist", func() error {
		base := md.DeepCopy()
		md.Spec.Template.Spec.InfrastructureRef.Name = "no-such-template"
		return s.stack.Client.Patch(s.ctx, md, client.MergeFrom(base))
	}, "no-such-template")

	// ClusterClass: the files variable moves its file to another path. The patch puts
	// it into the KubeadmControlPlane: the old file would be removed, which the agent
	// does not do in place.
	cc := &clusterv1.Cluster{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: class}, cc); err != nil {
		t.Fatal(err)
	}
	// The controllers keep writing the Cluster's status (and our fleet annotations):
	// a refused write shows as an unchanged generation and variable, not an unchanged
	// resourceVersion.
	classGeneration, classFiles := cc.Generation, topologyVariable(cc, "files")
	refused("ClusterClass: Cluster.spec.topology variable files moved to another path", func() error {
		base := cc.DeepCopy()
		raw, err := jsonValue([]localstack.File{{Path: "/etc/capi-inplace-e2e/moved", Content: "0"}})
		if err != nil {
			return err
		}
		for i := range cc.Spec.Topology.Variables {
			if cc.Spec.Topology.Variables[i].Name == "files" {
				cc.Spec.Topology.Variables[i].Value = raw
			}
		}
		return s.stack.Client.Patch(s.ctx, cc, client.MergeFrom(base))
	}, "Cluster "+s.ns+"/"+class, "files /etc/capi-inplace-e2e/round are removed", class)
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: class}, cc); err != nil {
		t.Fatal(err)
	}
	if cc.Generation != classGeneration || topologyVariable(cc, "files") != classFiles {
		t.Fatalf("the refused topology write changed Cluster %s (generation %d -> %d, files %s -> %s)",
			class, classGeneration, cc.Generation, classFiles, topologyVariable(cc, "files"))
	}

	time.Sleep(5 * time.Second) // let a wrongly admitted rollout show in the watch
	s.assertNoMachineChurn(watch)

	// ClusterClass, allowed: the files variable changes the file's content, which the
	// agent writes in place. The Cluster write goes through, and so does the topology
	// controller's KubeadmControlPlane write that follows from it (no rollout awaited).
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: class}, cc); err != nil {
		t.Fatal(err)
	}
	base := cc.DeepCopy()
	raw, err := jsonValue([]localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cc.Spec.Topology.Variables {
		if cc.Spec.Topology.Variables[i].Name == "files" {
			cc.Spec.Topology.Variables[i].Value = raw
		}
	}
	if err := s.stack.Client.Patch(s.ctx, cc, client.MergeFrom(base)); err != nil {
		t.Fatalf("ClusterClass: the guard refused a files change it can update in place: %v", err)
	}
	s.logf("EVIDENCE ClusterClass: files variable content change admitted at the Cluster write")
	s.eventually(time.Minute, "the topology controller's KubeadmControlPlane write", func() error {
		list := &controlplanev1.KubeadmControlPlaneList{}
		if err := s.stack.Client.List(s.ctx, list, client.InNamespace(s.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: class}); err != nil {
			return err
		}
		for _, k := range list.Items {
			for _, f := range k.Spec.KubeadmConfigSpec.Files {
				if f.Path == "/etc/capi-inplace-e2e/round" && f.Content == "1" {
					s.logf("EVIDENCE ClusterClass: the derived KubeadmControlPlane write was admitted (%s files content 1)", k.Name)
					return nil
				}
			}
		}
		return fmt.Errorf("no KubeadmControlPlane of Cluster %s has the new files content yet", class)
	})
	s.assertNoMachineChurn(watch)

	// The override: one MachineDeployment change that replaces the worker.
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: plain + "-md-0"}, md); err != nil {
		t.Fatal(err)
	}
	base2 := md.DeepCopy()
	if md.Annotations == nil {
		md.Annotations = map[string]string{}
	}
	md.Annotations[inplacev1.AllowReplaceAnnotation] = "e2e-CHG-1"
	// One minor up with maxUnavailable 0: Cluster API surges a new worker first.
	md.Spec.Template.Spec.Version = toVersion
	md.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(0))
	md.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
	if err := s.stack.Client.Patch(s.ctx, md, client.MergeFrom(base2)); err != nil {
		t.Fatalf("the override did not let the change through: %v", err)
	}
	s.eventually(time.Minute, "the override's Event", func() error {
		list := &eventsv1.EventList{}
		if err := s.stack.Client.List(s.ctx, list, client.InNamespace(s.ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == inplacev1.EventGuardOverridden && e.Regarding.Name == md.Name && strings.Contains(e.Note, "e2e-CHG-1") {
				s.logf("EVIDENCE override Event on MachineDeployment %s: %s", md.Name, e.Note)
				return nil
			}
		}
		return fmt.Errorf("no %s Event on MachineDeployment %s yet", inplacev1.EventGuardOverridden, md.Name)
	})
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: plain + "-md-0"}, md); err != nil {
		t.Fatal(err)
	}
	refused("a second replacing change with the same stored override value", func() error {
		base := md.DeepCopy()
		md.Spec.Template.Spec.InfrastructureRef.Name = "no-such-template"
		return s.stack.Client.Patch(s.ctx, md, client.MergeFrom(base))
	}, "no-such-template")
}

// topologyVariable is the raw JSON value of a Cluster's topology variable, "" when unset.
func topologyVariable(c *clusterv1.Cluster, name string) string {
	for _, v := range c.Spec.Topology.Variables {
		if v.Name == name {
			return string(v.Value.Raw)
		}
	}
	return ""
}
