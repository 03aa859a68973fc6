package agentinstall

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

const (
	// AgentName names the agent's ServiceAccount, DaemonSet and RBAC objects.
	AgentName = "capi-inplace-agent"
	// PolicyName names the ValidatingAdmissionPolicy and its binding.
	PolicyName = "capi-inplace-agent-own-node"
	// GuardVersionAnnotation on the policy holds the GuardVersion it enforces.
	GuardVersionAnnotation = inplacev1.GroupName + "/node-guard"
	// GuardVersion numbers what the policy covers; Guarded accepts an installed
	// policy of this version or later. 2: AgentAnnotations are refused to anyone
	// but their node's agent, through nodes and nodes/status (1, unannotated, only
	// confined the agent).
	GuardVersion = 2
	// ManifestHashAnnotation on the DaemonSet holds the hash of everything installed.
	ManifestHashAnnotation = inplacev1.GroupName + "/agent-manifests"
	// NodeNameExtra is the user-info extra key the API server sets from a pod-bound
	// service account token's node claim.
	NodeNameExtra = "authentication.kubernetes.io/node-name"
	// HostRoot is where the agent container sees the host's root file system.
	HostRoot = "/host"
	// MetricsPort is where the installed agent serves its Prometheus metrics
	// (plain HTTP /metrics only, docs/metrics.md) on every address of its node:
	// the agent runs in the host network, so Prometheus scrapes <node IP>:9442.
	// Next to the agent's health port 9441 (loopback only); clear of the kubelet (10248, 10250),
	// kube-proxy (10249, 10256), node-exporter (9100) and etcd (2379-2381).
	MetricsPort int32 = 9442
	// MetricsPortName names the container port, for a PodMonitor's endpoint.
	MetricsPortName = "metrics"

	// The agent container's requests: an idle agent measured about 30 MiB
	// resident on real nodes (docs/real-node.md).
	agentCPURequest    = "10m"
	agentMemoryRequest = "64Mi"
)

// Config parameterises the agent's manifests.
type Config struct {
	// Image is the agent's container image.
	Image string
	// Args are the container's arguments; nil means ["agent", "--host-root=/host",
	// "--metrics-addr=:9442"] (the agent reads its node name from $NODE_NAME).
	// Arguments given here replace those: pass --metrics-addr=:9442 to keep the
	// metrics the DaemonSet declares (MetricsPort).
	Args []string
	// APIServerHost and APIServerPort, when set, are the workload cluster's
	// control-plane endpoint (Cluster.spec.controlPlaneEndpoint). The agent then
	// reaches its API server there instead of through the kubernetes Service, so it
	// depends on neither kube-proxy nor the CNI, which an upgrade restarts (kubeadm
	// upgrade apply replaces kube-proxy), nor on a cluster that runs without them.
	APIServerHost string
	APIServerPort int32
	// CELGates grants the agent `list pods` across the cluster, which CEL gates
	// need: they see the pods bound to the agent's node, listed with the field
	// selector spec.nodeName=<node>, which RBAC cannot require, so the grant reads
	// every pod's spec and status (never Secrets; no get, watch or write). Set it
	// only when the policy gives a Machine of the cluster a CEL gate; off (the
	// default), the agent reads no pod but kube-system's control-plane mirror pods.
	// The ClusterRole is part of the manifest hash, so turning it on or off
	// re-applies the objects (docs/gates.md).
	CELGates bool
}

// ServiceAccountUsername is the user name the agent authenticates as.
func ServiceAccountUsername() string {
	return "system:serviceaccount:" + inplacev1.AgentNamespace + ":" + AgentName
}

func labels() map[string]string {
	return map[string]string{
		inplacev1.ManagedByLabel:    inplacev1.ManagedByValue,
		"app.kubernetes.io/name":    AgentName,
		"app.kubernetes.io/part-of": "capi-inplace",
	}
}

func meta(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels()}
}

// Objects returns the agent's manifests in apply order, the DaemonSet last so that
// it only starts once its RBAC and policy exist. The DaemonSet carries the hash of
// all objects in ManifestHashAnnotation.
func Objects(cfg Config) ([]client.Object, error) {
	if cfg.Image == "" {
		return nil, fmt.Errorf("agent image is empty")
	}
	args := cfg.Args
	if args == nil {
		args = []string{"agent", "--host-root=" + HostRoot, fmt.Sprintf("--metrics-addr=:%d", MetricsPort)}
	}
	ns := inplacev1.AgentNamespace
	objs := []client.Object{
		&corev1.Namespace{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: mergeLabels(labels(), map[string]string{
				// The agent is privileged by design (it replaces the OS and kubelet).
				"pod-security.kubernetes.io/enforce": "privileged",
			})},
		},
		&corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: meta(AgentName, ns),
		},
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: meta(AgentName, ""),
			Rules:      clusterRules(cfg.CELGates),
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: meta(AgentName, ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AgentName, Namespace: ns}},
		},
		// The agent watches its own plan Secret by name (a field selector), which RBAC
		// authorizes as list/watch of the namespace: every agent can read every plan
		// Secret, and each plan is sealed to its node's key so that only that node can
		// open it (see the package doc).
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: meta(AgentName, ns),
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"},
			}},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: meta(AgentName, ns),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AgentName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AgentName, Namespace: ns}},
		},
		// The static-pod health gate reads the control-plane mirror pods
		// (kube-system/<component>-<node>); nothing else of kube-system.
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: meta(AgentName, metav1.NamespaceSystem),
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"},
			}},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: meta(AgentName, metav1.NamespaceSystem),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AgentName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AgentName, Namespace: ns}},
		},
	}
	objs = append(objs, guardObjects()...)
	ds := daemonSet(cfg.Image, args, apiServerEnv(cfg))
	hash, err := hashObjects(append(objs, ds))
	if err != nil {
		return nil, err
	}
	ds.Annotations = map[string]string{ManifestHashAnnotation: hash}
	return append(objs, ds), nil
}

// guardObjects are the policy that keeps a node's AgentAnnotations to its agent
// and its binding, in apply order.
func guardObjects() []client.Object {
	return []client.Object{
		ownNodePolicy(),
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: meta(PolicyName, ""),
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        PolicyName,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}

// clusterRules are the agent's cluster-wide permissions. ClusterRole rules are an
// atomic list for server-side apply, so a rule dropped here is removed from the
// installed role on the next apply.
func clusterRules(celGates bool) []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{{
		// patch is confined to the agent's own Node and annotations by PolicyName.
		APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"},
	}}
	if celGates {
		// CEL gates see the pods bound to the agent's node (Config.CELGates).
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}})
	}
	return rules
}

func mergeLabels(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// AgentAnnotations are the node-protocol annotations only a node's own agent writes:
// its key (plans are sealed to it) and its report (what the coordinator takes as
// done). The policy refuses any change to them by anyone else (GuardPolicy).
func AgentAnnotations() []string {
	return []string{inplacev1.CurrentPlanAnnotation, inplacev1.StateAnnotation, inplacev1.StatusAnnotation, inplacev1.AgentKeyAnnotation, inplacev1.StagingStatusAnnotation}
}

// ownNodePolicy confines the agent to its own Node's AgentAnnotations and keeps
// everyone else off those annotations, through nodes and nodes/status alike (any
// identity that may patch nodes/status, such as a CNI DaemonSet's token on every
// node, could otherwise rewrite another node's key or report). The one exception
// is an identity that may patch this policy's binding: it can switch the policy
// off anyway, and the coordinator, which installs it with the
// cluster's admin credentials, is one (it withdraws a failed report on retry).
// Writes that touch none of the annotations, and are not the agent's, never
// reach the policy (its match condition), so the kubelet's status updates do not
// depend on it.
func ownNodePolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	allowed := AgentAnnotations()
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = "'" + a + "'"
	}
	list := "[" + strings.Join(quoted, ", ") + "]"
	isAgent := fmt.Sprintf("request.userInfo.username == '%s'", ServiceAccountUsername())
	// Match conditions cannot use variables: the change test is spelled out here.
	// oldObject is null on CREATE.
	protocolChanged := list + ".exists(k, object.metadata.?annotations[?k] != " +
		"(oldObject == null ? optional.none() : oldObject.metadata.?annotations[?k]))"
	// One authorizer check (each is costly for CEL's budget): patch, the verb the
	// installer's server-side apply needs, so the coordinator always passes.
	mayRemovePolicy := fmt.Sprintf("authorizer.group('admissionregistration.k8s.io')."+
		"resource('validatingadmissionpolicybindings').name('%s').check('patch').allowed()", PolicyName)
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Labels: labels(), Annotations: map[string]string{
			GuardVersionAnnotation: strconv.Itoa(GuardVersion),
		}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes", "nodes/status"},
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "agent-or-agent-annotations",
				Expression: isAgent + " || " + protocolChanged,
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "isAgent", Expression: isAgent},
				{Name: "claims", Expression: "request.userInfo.?extra.orValue({})"},
				{Name: "allowed", Expression: list},
				{Name: "newAnn", Expression: "object.metadata.?annotations.orValue({})"},
				{Name: "oldAnn", Expression: "oldObject == null ? {} : oldObject.metadata.?annotations.orValue({})"},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: fmt.Sprintf("!variables.isAgent || ('%[1]s' in variables.claims && variables.claims['%[1]s'].size() > 0 && object.metadata.name == variables.claims['%[1]s'][0])", NodeNameExtra),
					Message:    "the capi-inplace agent may only modify the node it runs on",
					Reason:     ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression: "!variables.isAgent || (oldObject != null && " +
						"variables.newAnn.all(k, k in variables.allowed || (k in variables.oldAnn && variables.oldAnn[k] == variables.newAnn[k])) && " +
						"variables.oldAnn.all(k, k in variables.allowed || k in variables.newAnn))",
					Message: "the capi-inplace agent may only change its own annotations (" + strings.Join(allowed, ", ") + ")",
					Reason:  ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression: "!variables.isAgent || (oldObject != null && " +
						"object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({}) && " +
						"object.?spec.orValue({}) == oldObject.?spec.orValue({}))",
					Message: "the capi-inplace agent may not change node labels or spec",
					Reason:  ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression: "variables.isAgent || " + mayRemovePolicy,
					Message:    "only the node's capi-inplace agent may change " + strings.Join(allowed, ", "),
					Reason:     ptr.To(metav1.StatusReasonForbidden),
				},
			},
		},
	}
}

// apiServerEnv points client-go's in-cluster configuration at the control-plane
// endpoint: explicit container variables take precedence over the ones the kubelet
// derives from the kubernetes Service.
func apiServerEnv(cfg Config) []corev1.EnvVar {
	if cfg.APIServerHost == "" || cfg.APIServerPort == 0 {
		return nil
	}
	return []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: cfg.APIServerHost},
		{Name: "KUBERNETES_SERVICE_PORT", Value: strconv.Itoa(int(cfg.APIServerPort))},
	}
}

func daemonSet(image string, args []string, extraEnv []corev1.EnvVar) *appsv1.DaemonSet {
	sel := map[string]string{"app.kubernetes.io/name": AgentName}
	hostPathDir := corev1.HostPathDirectory
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: meta(AgentName, inplacev1.AgentNamespace),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type: appsv1.RollingUpdateDaemonSetStrategyType,
			},
			Template: corev1.PodTemplateSpec{
				// The prometheus.io annotations are the common scrape convention (a
				// kubernetes_sd "pod" job keeping annotated pods); a PodMonitor selects
				// the label and the "metrics" port instead (docs/metrics.md).
				ObjectMeta: metav1.ObjectMeta{Labels: mergeLabels(labels(), sel), Annotations: map[string]string{
					"prometheus.io/scrape": "true",
					"prometheus.io/port":   fmt.Sprint(MetricsPort),
					"prometheus.io/path":   "/metrics",
				}},
				Spec: corev1.PodSpec{
					ServiceAccountName: AgentName,
					// The agent must keep working while the CNI or the node's own API
					// server restarts during an upgrade, so it uses the host network.
					HostNetwork: true,
					// systemd answers a D-Bus client only if it can read the client's
					// PID: from a PID namespace of its own, every systemctl call (reload
					// units, restart the kubelet, reboot) fails with "Failed to connect
					// to bus: No data available" (seen on a real systemd node). The agent
					// shares the host's PID namespace for that; it is privileged with the
					// host's root already.
					HostPID:           true,
					DNSPolicy:         corev1.DNSClusterFirstWithHostNet,
					PriorityClassName: "system-node-critical",
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						// The coordinator cordons the node before it publishes a plan.
						{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
						{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
					},
					Containers: []corev1.Container{{
						Name:            "agent",
						Image:           image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args:            args,
						// In the host network the port is the node's: hostPort equal to
						// containerPort (what the API server defaults it to), so the
						// scheduler knows the node's port is taken.
						Ports: []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: MetricsPort, HostPort: MetricsPort, Protocol: corev1.ProtocolTCP}},
						Env: append([]corev1.EnvVar{
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}},
							// The agent's rescue static pod runs this image (kube.RescueManifest).
							{Name: "AGENT_IMAGE", Value: image},
						}, extraEnv...),
						// Replacing the OS image, kubelet and kubeadm needs the host's root
						// file system and privileges; host IPC is not needed.
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
						// Requests only, as node agents of this kind do (the machine-config
						// daemon, kured): what the agent runs (kubeadm, an etcd snapshot
						// restore of up to etcd's quota, crictl) runs in its cgroup, and a
						// memory limit would OOM-kill an update half-way, worse than the
						// memory it saves. Idle connections, the way a pod could grow it,
						// are bounded at the agent's endpoints.
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse(agentCPURequest),
							corev1.ResourceMemory: resource.MustParse(agentMemoryRequest),
						}},
						VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: HostRoot}},
					}},
					Volumes: []corev1.Volume{{
						Name:         "host",
						VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: &hostPathDir}},
					}},
				},
			},
		},
	}
}

func hashObjects(objs []client.Object) (string, error) {
	h := sha256.New()
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return "", fmt.Errorf("hash agent manifests: %w", err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}
