package agent_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// publicKey waits for the key the node's agent publishes on its Node.
func (n *node) publicKey() *ecdh.PublicKey {
	n.t.Helper()
	var key *ecdh.PublicKey
	NewWithT(n.t).Eventually(func() error {
		var err error
		key, err = nodeplan.AgentKey(n.get().Annotations)
		return err
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed(), "the agent publishes its key")
	return key
}

func (n *node) stateDir() string { return filepath.Join(n.root, "var", "lib", "capi-inplace") }

// TestPlanSealedToAnotherKeyIsRefused: the agent keeps its key on the host across
// restarts (0600); a plan sealed to another key (the node's key before its host was
// reinstalled) is refused with a Pending status that says so and touches nothing; the
// same plan sealed to the node's key then applies under the same hash.
func TestPlanSealedToAnotherKeyIsRefused(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "worker-rekeyed", "v1.35.2", false)
	n.start()
	key := n.publicKey()
	fi, err := os.Stat(filepath.Join(n.stateDir(), agent.NodeKeyFile))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	n.kill()
	n.start()
	g.Consistently(func() bool { k, _ := nodeplan.AgentKey(n.get().Annotations); return k != nil && k.Equal(key) }, 2*time.Second).
		Should(BeTrue(), "a restarted agent keeps its key")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	before := tree(t, n.root)

	oldKey, err := ecdh.X25519().GenerateKey(rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	plan := workerPlan(n.name)
	raw, err := nodeplan.Seal(plan, oldKey.PublicKey())
	g.Expect(err).NotTo(HaveOccurred())
	hash, _ := plan.Hash()
	n.publish(raw, hash)
	n.waitPhase(g, hash, protocol.PhasePending, 20*time.Second)
	g.Eventually(func() string { return n.status().Reason }, 10*time.Second).Should(Equal(protocol.ReasonSealedToAnotherKey))
	st := n.status()
	g.Expect(st.Message).To(ContainSubstring("sealed to key " + protocol.KeyID(oldKey.PublicKey())))
	g.Expect(st.Message).To(ContainSubstring("this node's key is " + protocol.KeyID(key)))
	n.expectPendingAndUntouched(g, before, 2*time.Second)

	// The coordinator seals the same plan to the node's key: same hash, applied.
	n.expectPlanApplies(g, plan, hash)
}

// expectPendingAndUntouched checks that the node's plan stays Pending for d
// (refused, not failed), that no command ran and that nothing on the host
// changed since before but the journal.
func (n *node) expectPendingAndUntouched(g Gomega, before map[string]string, d time.Duration) {
	n.t.Helper()
	g.Consistently(func() protocol.Phase { return n.status().Phase }, d).Should(Equal(protocol.PhasePending), "refused, not failed")
	g.Expect(n.read(".sim/commands.log")).To(Equal("<missing>"), "no command ran")
	after := tree(n.t, n.root)
	delete(after, "var/lib/capi-inplace/journal.json")
	g.Expect(after).To(Equal(before), "nothing on the host changed")
}

// expectPlanApplies publishes plan sealed to the node's key and checks that it
// commits under hash.
func (n *node) expectPlanApplies(g Gomega, plan *protocol.NodePlan, hash string) {
	n.t.Helper()
	g.Expect(n.publishPlan(plan)).To(Equal(hash))
	n.waitPhase(g, hash, protocol.PhaseCommitted, 60*time.Second)
	g.Expect(n.read("etc/app/app.conf")).To(Equal("new\n"))
}

// TestPlanForANewerAgentWaits: a plan whose envelope has a field this agent does
// not know (a newer coordinator wrote it while the agent DaemonSet still rolls
// out) is neither applied nor refused for good: the Node says Pending,
// AgentOutdated, nothing on the host changes, and the same plan, once readable
// (as the newer agent reads it), applies under the same hash. Refused as
// InvalidPlan, it was journaled Failed for good and counted against the budget.
func TestPlanForANewerAgentWaits(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "worker-outdated", "v1.35.2", false)
	n.start()
	key := n.publicKey()
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	before := tree(t, n.root)

	plan := workerPlan(n.name)
	raw, err := nodeplan.Seal(plan, key)
	g.Expect(err).NotTo(HaveOccurred())
	newer := bytes.Replace(raw, []byte(`"kind"`), []byte(`"signature":"from a newer coordinator","kind"`), 1)
	g.Expect(newer).NotTo(Equal(raw))
	hash, _ := plan.Hash()
	n.publish(newer, hash)
	g.Eventually(func() string { return n.status().Reason }, 20*time.Second).Should(Equal(protocol.ReasonAgentOutdated))
	g.Expect(n.status().Phase).To(Equal(protocol.PhasePending))
	g.Expect(n.status().Message).To(ContainSubstring(`unknown field "signature"`))
	n.expectPendingAndUntouched(g, before, 3*time.Second)
	n.expectPlanApplies(g, plan, hash)
}

// adminConfig is the suite's admin connection to the API server.
func adminConfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// boundAgentCredentials creates a Pod of the agent's ServiceAccount on nodeName and
// a token bound to it (TokenRequest), as the kubelet mounts into the agent's pod:
// the API server puts the node's name into the token's claims. It returns a
// kubeconfig file with that token and a client using it.
func boundAgentCredentials(t *testing.T, restConfig *rest.Config, nodeName string) (string, kubernetes.Interface) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: inplacev1.AgentNamespace, Name: "agent-" + nodeName},
		Spec: corev1.PodSpec{NodeName: nodeName, ServiceAccountName: agentinstall.AgentName, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/capi-inplace:test"}}},
	}
	pod, err := client.CoreV1().Pods(inplacev1.AgentNamespace).Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := client.CoreV1().ServiceAccounts(inplacev1.AgentNamespace).CreateToken(ctx, agentinstall.AgentName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: restConfig.Host, CertificateAuthorityData: restConfig.CAData}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "agent"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig-"+nodeName)
	g.Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: restConfig.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: restConfig.CAData}})
	g.Expect(err).NotTo(HaveOccurred())

	// The API server sees the agent's service account on this node.
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(review.Status.UserInfo.Username).To(Equal(agentinstall.ServiceAccountUsername()))
	g.Expect(review.Status.UserInfo.Extra).To(HaveKeyWithValue(agentinstall.NodeNameExtra, authenticationv1.ExtraValue{nodeName}))
	return path, cs
}

// TestPlansAreNodePrivate runs two real agents with the agent's real, installed
// RBAC and admission policy and real pod-bound tokens of two nodes. Node B's agent
// publishes its key and applies its plan, which carries a secret; node A's agent can
// fetch B's plan Secret (RBAC cannot prevent that) but not open it with its own key
// from its host, cannot replace B's key with its own, and cannot obtain a token
// bound to another node.
func TestPlansAreNodePrivate(t *testing.T) {
	g := NewWithT(t)
	a := newNode(t, "private-a", "v1.35.2", false) // skips without envtest
	b := newNode(t, "private-b", "v1.35.2", false)
	restConfig := adminConfig(t)
	ctx := context.Background()
	admin, err := ctrlclient.New(restConfig, ctrlclient.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = agentinstall.Ensure(ctx, admin, agentinstall.Config{Image: "registry.example/capi-inplace:test"})
	g.Expect(err).NotTo(HaveOccurred())

	kubeconfigA, clientA := boundAgentCredentials(t, restConfig, a.name)
	kubeconfigB, _ := boundAgentCredentials(t, restConfig, b.name)

	// The admission policy is loaded asynchronously: wait until it confines agent A.
	// The probe is a dry run: before the policy is loaded it would otherwise succeed
	// and leave a bogus key on B's Node, which the test could read as B's (the
	// flake: "a key read as a low-order point").
	foreignKey := `{"metadata":{"annotations":{"` + inplacev1.AgentKeyAnnotation + `":"x25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}}}`
	g.Eventually(func() error {
		_, err := clientA.CoreV1().Nodes().Patch(ctx, b.name, types.MergePatchType, []byte(foreignKey), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}, 20*time.Second, 200*time.Millisecond).Should(MatchError(ContainSubstring("may only modify the node it runs on")))

	// A later --kubeconfig wins: each agent runs with its own node's token only.
	a.start("--kubeconfig", kubeconfigA)
	b.start("--kubeconfig", kubeconfigB)
	keyA, keyB := a.publicKey(), b.publicKey() // each through its own credentials and the policy
	g.Expect(keyA.Equal(keyB)).To(BeFalse())

	// B's plan: a file whose content came from a Secret, and a password hash.
	const secret = "db-password=B-ONLY-3f9c1e"
	plan := protocol.NewPlan(b.name)
	plan.Machine = protocol.MachineRef{Namespace: "default", Name: b.name, Cluster: "c1"}
	plan.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.35.2", Action: protocol.KubeadmNone}
	plan.Files = []protocol.File{{Path: "/etc/app/credentials", Content: []byte(secret), Permissions: "0600"}}
	hash := b.publishPlan(plan)
	b.waitPhase(g, hash, protocol.PhaseCommitted, 60*time.Second)
	g.Expect(b.read("etc/app/credentials")).To(Equal(secret), "B applied its own plan")

	// A fetches B's plan Secret with A's own credentials: allowed, and useless.
	sec, err := clientA.CoreV1().Secrets(inplacev1.AgentNamespace).Get(ctx, inplacev1.PlanSecretName(b.name), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "RBAC cannot confine reads to the node's own Secret; sealing does")
	data := sec.Data[inplacev1.PlanSecretDataKey]
	g.Expect(bytes.Contains(data, []byte("B-ONLY-3f9c1e"))).To(BeFalse())
	g.Expect(bytes.Contains(data, []byte("/etc/app/credentials"))).To(BeFalse())
	privA, err := agent.LoadOrCreateNodeKey(a.stateDir()) // the key A's agent made on A's host
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(privA.PublicKey().Equal(keyA)).To(BeTrue())
	sealed, err := protocol.DecodeSealedPlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = sealed.Open(privA)
	var other *protocol.SealedToAnotherKeyError
	g.Expect(errors.As(err, &other)).To(BeTrue(), "got %v", err)

	// A cannot make the coordinator seal B's next plan to A's key, nor get B's identity.
	stolen := `{"metadata":{"annotations":{"` + inplacev1.AgentKeyAnnotation + `":"` + protocol.FormatAgentKey(keyA) + `"}}}`
	_, err = clientA.CoreV1().Nodes().Patch(ctx, b.name, types.MergePatchType, []byte(stolen), metav1.PatchOptions{})
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err).To(MatchError(ContainSubstring("may only modify the node it runs on")))
	g.Expect(b.publicKey().Equal(keyB)).To(BeTrue())
	_, err = clientA.CoreV1().ServiceAccounts(inplacev1.AgentNamespace).CreateToken(ctx, agentinstall.AgentName, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	_, err = clientA.CoreV1().Secrets(inplacev1.AgentNamespace).Update(ctx, sec, metav1.UpdateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
}
