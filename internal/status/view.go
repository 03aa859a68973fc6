package status

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet/machinestate"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ReportAPIVersion and ReportKind identify the JSON document printed by
// `capi-inplace status -o json`.
const (
	ReportAPIVersion = "status.inplace.capi-inplace.dev/v1alpha1"
	ReportKind       = "InPlaceStatus"
)

// Snapshot is everything Gather read, unprocessed: the input of Build.
type Snapshot struct {
	// Namespace is the namespace that was looked at ("" for all namespaces).
	Namespace string
	Clusters  []ClusterSnapshot
}

// ClusterSnapshot is one Cluster with its Machines and the Nodes of its workload cluster.
type ClusterSnapshot struct {
	Cluster  clusterv1.Cluster
	Machines []clusterv1.Machine
	// Nodes of the workload cluster by name; nil when WorkloadErr is set.
	Nodes map[string]*corev1.Node
	// WorkloadErr is why the workload cluster could not be read, if it could not.
	WorkloadErr error
	// OwnerSpecs are the current spec keys (fleet.OwnerSpecKey) of the owners the
	// Cluster's fleet record names (fleet.Owners), by owner ("MachineDeployment/md-0"):
	// an owner absent here is gone. BuildWithPools counts a recorded failure as the
	// coordinator does (fleet.Counted): not once its owner's spec changed.
	OwnerSpecs map[string]string
}

// Report is the whole status, the document behind both the table and `-o json`.
// Its JSON field names are a stable interface: fields are only ever added.
type Report struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// GeneratedAt is when the data was read (RFC 3339, UTC).
	GeneratedAt time.Time `json:"generatedAt"`
	// Namespace is the namespace looked at; empty for all namespaces.
	Namespace string        `json:"namespace"`
	Summary   Summary       `json:"summary"`
	Clusters  []ClusterView `json:"clusters"`
}

// Summary counts machines over every cluster of a Report.
type Summary struct {
	Machines int `json:"machines"`
	// InProgress counts machines whose node is in a non-terminal in-place phase.
	InProgress int `json:"inProgress"`
	// Failed counts machines whose node is in phase Failed or RolledBack, or is
	// Degraded: the condition for status's non-zero exit code.
	Failed int `json:"failed"`
	// Degraded counts machines whose node is Degraded (also counted in Failed).
	Degraded int `json:"degraded,omitempty"`
	// UnreachableClusters counts clusters whose Nodes could not be read.
	UnreachableClusters int `json:"unreachableClusters"`
}

// ClusterView is one Cluster.
type ClusterView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// WorkloadReachable is false when the workload cluster's Nodes could not be read;
	// the machines are then shown from management-side data only.
	WorkloadReachable bool   `json:"workloadReachable"`
	WorkloadError     string `json:"workloadError,omitempty"`
	// Paused is true when the Cluster carries capi-inplace's paused annotation: no new
	// node update starts.
	Paused bool `json:"paused"`
	// InPlaceUpdate is capi-inplace's condition on the Cluster (set by the single-node
	// control-plane path).
	InPlaceUpdate *Condition    `json:"inPlaceUpdate,omitempty"`
	Machines      []MachineView `json:"machines"`
	// Fleet is the cluster's fleet controls (docs/fleet-controls.md).
	Fleet FleetView `json:"fleet"`
	// Pools are the cluster's fleet pools, one per pool its Machines fall in,
	// when status was given the policy (status --policy-file); absent without.
	Pools []PoolView `json:"pools,omitempty"`
}

// Role values of MachineView.Role.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
)

// DrainState values of Drain.State.
const (
	// DrainUnknown: no Node to look at (not yet provisioned, or workload unreachable).
	DrainUnknown = "Unknown"
	// DrainSchedulable: the Node takes new pods.
	DrainSchedulable = "Schedulable"
	// DrainCordoned: capi-inplace cordoned the Node (its cordoned-by annotation is set).
	DrainCordoned = "Cordoned"
	// DrainCordonedExternally: the Node is unschedulable but not by capi-inplace's hand;
	// capi-inplace will not uncordon it.
	DrainCordonedExternally = "CordonedExternally"
	// DrainBlocked: capi-inplace's drain is blocked (a PodDisruptionBudget or a pod),
	// as reported in the Machine's InPlaceUpdate condition.
	DrainBlocked = "Blocked"
)

// MachineView is one Machine and its Node.
type MachineView struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
	// Role is "control-plane" or "worker".
	Role string `json:"role"`
	// Node is the Machine's status.nodeRef.name; empty until the node joined.
	Node string `json:"node,omitempty"`
	// Version is the Machine's desired Kubernetes version (spec.version).
	Version string `json:"version,omitempty"`
	// KubeletVersion is the Node's kubelet version (from the Machine's status.nodeInfo
	// when the workload cluster is unreachable). In place is done when it equals Version.
	KubeletVersion string `json:"kubeletVersion,omitempty"`
	// MachinePhase is Cluster API's phase of the Machine (Running, Updating, ...).
	MachinePhase string `json:"machinePhase,omitempty"`

	// Phase is the agent's phase for the Node's desired plan (internal/protocol Phase:
	// Pending, Staging, Applying, Rebooting, Verifying, Committed, RollingBack,
	// RolledBack, Failed); empty when the Node has no plan. Pending also means "the
	// agent has not picked the desired plan up yet".
	Phase protocol.Phase `json:"phase,omitempty"`
	// Step of Steps is the agent's progress through the plan's actions.
	Step  int `json:"step"`
	Steps int `json:"steps"`
	// Action is the agent's action in progress or last done.
	Action  string `json:"action,omitempty"`
	Message string `json:"message,omitempty"`
	// Failure is the cause of a Failed or RolledBack phase ("reason: message").
	Failure string `json:"failure,omitempty"`
	// Degraded: the node's rollback failed or its agent cannot tell what it did
	// (protocol.NodeStatus.Broken, or the Machine's InPlaceUpdateDegraded condition).
	// The coordinator keeps it cordoned; it is not usable until a human repairs it.
	Degraded bool `json:"degraded,omitempty"`

	// DesiredPlan and CurrentPlan are the Node's plan hashes (desired by the
	// coordinator, last committed by the agent).
	DesiredPlan string `json:"desiredPlan,omitempty"`
	CurrentPlan string `json:"currentPlan,omitempty"`
	// Staging is the agent's staging of the next plan before the node is cordoned;
	// nil when the node stages nothing.
	Staging *Staging `json:"staging,omitempty"`
	// StagedForWindow: the update is staged on the node ahead of a closed
	// maintenance window and waits for it, the node serving and uncordoned
	// (machinestate.Staged, read from the Machine: shown when the workload
	// cluster is unreachable too).
	StagedForWindow bool `json:"stagedForWindow,omitempty"`
	// WaitingForControlPlane is why a worker's update waits, before cordon, for
	// the cluster's control plane to reach the version it raises the kubelet to
	// (the Machine's InPlaceUpdate condition message, reason
	// WaitingForControlPlane; machinestate.WaitingForControlPlane); "" when not.
	WaitingForControlPlane string `json:"waitingForControlPlane,omitempty"`

	// StartedAt is when the agent started the plan; ElapsedSeconds runs from there to
	// now, or to the last update once the phase is terminal.
	StartedAt      *time.Time `json:"startedAt,omitempty"`
	ElapsedSeconds int64      `json:"elapsedSeconds"`
	// UpdatedAt is when the agent last reported on the plan.
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`

	Drain      Drain        `json:"drain"`
	Conditions MachineConds `json:"conditions"`
	// Problems are why part of the view is missing (no node yet, unreadable status).
	Problems []string `json:"problems,omitempty"`
}

// Failed reports whether the Machine's node ended its plan in Failed or RolledBack,
// or is Degraded.
func (m MachineView) Failed() bool {
	return m.Phase == protocol.PhaseFailed || m.Phase == protocol.PhaseRolledBack || m.Degraded
}

// InProgress reports whether the Machine's node is working on a plan.
func (m MachineView) InProgress() bool {
	return m.Phase != "" && !m.Phase.Terminal()
}

// FailedMachines lists the machines of a Report that Failed or RolledBack, as
// "namespace/name (phase)".
func (r Report) FailedMachines() []string {
	var out []string
	for _, c := range r.Clusters {
		for _, m := range c.Machines {
			if m.Failed() {
				out = append(out, fmt.Sprintf("%s/%s (%s)", c.Namespace, m.Name, m.Phase))
			}
		}
	}
	return out
}

// Drain is the Node's scheduling state.
type Drain struct {
	// State is one of Unknown, Schedulable, Cordoned, CordonedExternally, Blocked.
	State         string `json:"state"`
	Unschedulable bool   `json:"unschedulable"`
	// CordonedBy is the value of capi-inplace's cordoned-by annotation on the Node.
	CordonedBy string `json:"cordonedBy,omitempty"`
	// Message explains a Blocked drain.
	Message string `json:"message,omitempty"`
}

// MachineConds holds the Machine conditions that matter for an in-place update.
type MachineConds struct {
	// Updating and UpToDate are Cluster API's v1beta2 Machine conditions.
	Updating *Condition `json:"updating,omitempty"`
	UpToDate *Condition `json:"upToDate,omitempty"`
	// InPlaceUpdate is capi-inplace's own condition on the Machine.
	InPlaceUpdate *Condition `json:"inPlaceUpdate,omitempty"`
}

// Condition is the part of a metav1.Condition that status shows.
type Condition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Build turns a Snapshot into a Report. It is pure: now is when the snapshot was taken.
func Build(s Snapshot, now time.Time) Report {
	r := Report{
		APIVersion:  ReportAPIVersion,
		Kind:        ReportKind,
		GeneratedAt: now.UTC().Truncate(time.Second),
		Namespace:   s.Namespace,
		Clusters:    []ClusterView{},
	}
	clusters := slices.Clone(s.Clusters)
	slices.SortFunc(clusters, func(a, b ClusterSnapshot) int {
		return cmp.Or(cmp.Compare(a.Cluster.Namespace, b.Cluster.Namespace), cmp.Compare(a.Cluster.Name, b.Cluster.Name))
	})
	for _, cs := range clusters {
		cv := ClusterView{
			Namespace:         cs.Cluster.Namespace,
			Name:              cs.Cluster.Name,
			WorkloadReachable: cs.WorkloadErr == nil,
			Paused:            cs.Cluster.Annotations[inplacev1.PausedAnnotation] == "true",
			InPlaceUpdate:     condition(&cs.Cluster, inplacev1.InPlaceUpdateCondition),
			Machines:          []MachineView{},
			Fleet:             buildFleet(&cs.Cluster, cs.Machines, now),
		}
		if cs.WorkloadErr != nil {
			cv.WorkloadError = cs.WorkloadErr.Error()
			r.Summary.UnreachableClusters++
		}
		for i := range cs.Machines {
			m := &cs.Machines[i]
			var node *corev1.Node
			if m.Status.NodeRef.IsDefined() && cs.Nodes != nil {
				node = cs.Nodes[m.Status.NodeRef.Name]
			}
			mv := buildMachine(m, node, cs.WorkloadErr == nil, now)
			r.Summary.Machines++
			if mv.Failed() {
				r.Summary.Failed++
			}
			if mv.Degraded {
				r.Summary.Degraded++
			}
			if mv.InProgress() {
				r.Summary.InProgress++
			}
			cv.Machines = append(cv.Machines, mv)
		}
		slices.SortFunc(cv.Machines, func(a, b MachineView) int {
			// Control plane first: it is updated first and matters most.
			return cmp.Or(cmp.Compare(roleOrder(a.Role), roleOrder(b.Role)), cmp.Compare(a.Name, b.Name))
		})
		r.Clusters = append(r.Clusters, cv)
	}
	return r
}

func roleOrder(role string) int {
	if role == RoleControlPlane {
		return 0
	}
	return 1
}

// buildMachine is the view of one Machine. node is nil when the Machine has no node
// yet or the Node could not be read; reachable says whether the workload cluster was.
func buildMachine(m *clusterv1.Machine, node *corev1.Node, reachable bool, now time.Time) MachineView {
	mv := MachineView{
		Name:         m.Name,
		UID:          string(m.UID),
		Role:         RoleWorker,
		Node:         m.Status.NodeRef.Name,
		Version:      m.Spec.Version,
		MachinePhase: m.Status.Phase,
		Drain:        Drain{State: DrainUnknown},
		Conditions: MachineConds{
			Updating:      condition(m, clusterv1.MachineUpdatingCondition),
			UpToDate:      condition(m, clusterv1.MachineUpToDateCondition),
			InPlaceUpdate: condition(m, inplacev1.InPlaceUpdateCondition),
		},
	}
	if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
		mv.Role = RoleControlPlane
	}
	if m.Status.NodeInfo != nil {
		mv.KubeletVersion = m.Status.NodeInfo.KubeletVersion
	}

	switch {
	case !m.Status.NodeRef.IsDefined():
		mv.Problems = append(mv.Problems, "no node yet")
	case !reachable:
		// Said once per cluster (ClusterView.WorkloadError), not per machine.
	case node == nil:
		mv.Problems = append(mv.Problems, fmt.Sprintf("node %s not found in the workload cluster", m.Status.NodeRef.Name))
	default:
		mv.KubeletVersion = node.Status.NodeInfo.KubeletVersion
		nodeSide(&mv, node, now)
	}

	switch v := machinestate.Of(m); v.State {
	case machinestate.DrainBlocked:
		mv.Drain.State = DrainBlocked
		mv.Drain.Message = v.Message
	case machinestate.WaitingForControlPlane:
		mv.WaitingForControlPlane = v.Message
	case machinestate.Staged:
		mv.StagedForWindow = true
	}
	// The agent's terminal phases carry the cause; otherwise our own condition may.
	if c := mv.Conditions.InPlaceUpdate; c != nil && c.Reason == inplacev1.ReasonDegraded {
		mv.Degraded = true
	}
	if mv.Failure == "" {
		if c := mv.Conditions.InPlaceUpdate; c != nil && inplacev1.FailedReason(c.Reason) {
			mv.Failure = joinNonEmpty(c.Reason, c.Message)
		}
	}
	if mv.StartedAt == nil && mv.Conditions.Updating != nil && mv.Conditions.Updating.Status == "True" {
		// No agent status yet: count from when Cluster API started the update.
		if t := conditions.GetLastTransitionTime(m, clusterv1.MachineUpdatingCondition); t != nil && !t.IsZero() {
			start := t.UTC()
			mv.StartedAt = &start
			mv.ElapsedSeconds = seconds(now.Sub(start))
		}
	}
	return mv
}

// nodeSide fills the view from the Node: drain state and the agent's protocol annotations.
func nodeSide(mv *MachineView, node *corev1.Node, now time.Time) {
	ann := node.Annotations
	mv.DesiredPlan = ann[inplacev1.DesiredPlanAnnotation]
	mv.CurrentPlan = ann[inplacev1.CurrentPlanAnnotation]

	mv.Drain = Drain{
		State:         DrainSchedulable,
		Unschedulable: node.Spec.Unschedulable,
		CordonedBy:    ann[inplacev1.CordonedByAnnotation],
	}
	if node.Spec.Unschedulable {
		mv.Drain.State = DrainCordonedExternally
		if mv.Drain.CordonedBy != "" {
			mv.Drain.State = DrainCordoned
		}
	}

	var st *protocol.NodeStatus
	if raw, ok := ann[inplacev1.StatusAnnotation]; ok {
		decoded, err := protocol.DecodeStatus(raw)
		if err != nil {
			mv.Problems = append(mv.Problems, fmt.Sprintf("unreadable agent status: %v", err))
		} else {
			st = &decoded
		}
	}

	switch {
	case st != nil && (mv.DesiredPlan == "" || st.PlanHash == mv.DesiredPlan):
		mv.Phase = st.Phase
		mv.Step, mv.Steps = st.Step, st.Steps
		mv.Action, mv.Message = st.Action, st.Message
		if st.Phase == protocol.PhaseFailed || st.Phase == protocol.PhaseRolledBack {
			mv.Failure = joinNonEmpty(st.Reason, st.Message)
		}
		mv.Degraded = st.Broken()
		if !st.StartedAt.IsZero() {
			start := st.StartedAt.UTC()
			mv.StartedAt = &start
			end := now
			if st.Phase.Terminal() && !st.UpdatedAt.IsZero() {
				end = st.UpdatedAt
			}
			mv.ElapsedSeconds = seconds(end.Sub(start))
		}
		if !st.UpdatedAt.IsZero() {
			at := st.UpdatedAt.UTC()
			mv.UpdatedAt = &at
		}
	case mv.DesiredPlan != "" && mv.DesiredPlan == mv.CurrentPlan:
		// Committed earlier; the status annotation is gone or about an older plan.
		mv.Phase = protocol.PhaseCommitted
	case mv.DesiredPlan != "":
		mv.Phase = protocol.PhasePending
		mv.Message = "waiting for the agent to pick up plan " + short(mv.DesiredPlan)
	}

	// A plan being staged is not desired yet: the node still serves, and the
	// staging report is the progress to show.
	sv, err := staging(node)
	if err != nil {
		mv.Problems = append(mv.Problems, fmt.Sprintf("unreadable staging status: %v", err))
	}
	if sv != nil && !mv.InProgress() {
		mv.Staging = sv
		mv.Phase, mv.Step, mv.Steps, mv.Action, mv.Message, mv.Failure = protocol.PhaseStaging, 0, 0, "", sv.Progress, ""
	}
}

func condition(obj conditions.Getter, conditionType string) *Condition {
	c := conditions.Get(obj, conditionType)
	if c == nil {
		return nil
	}
	return &Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
}

func seconds(d time.Duration) int64 {
	if d < 0 {
		return 0 // clock skew between the node and us
	}
	return int64(d / time.Second)
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

func joinNonEmpty(reason, message string) string {
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + message
}
