package status

import (
	"slices"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/fleet/machinestate"
)

// Fleet states of FleetView.State: the reason of the Cluster's InPlaceUpdate
// condition as the coordinator's fleet controls set it, shortened.
const (
	FleetActive       = "Active"
	FleetPaused       = "Paused"
	FleetHalted       = "Halted"
	FleetWindowClosed = "WindowClosed"
	FleetSoaking      = "Soaking"
)

// FleetView is the fleet controls of one Cluster, read from its annotations and
// condition (the policy's pools are not visible from here: the condition says
// what the coordinator last decided with them).
type FleetView struct {
	// Guard is "on" or "off" (the Cluster's inplace.capi-inplace.dev/guard=disabled).
	Guard string `json:"guard"`
	// State is Active, Paused, Halted, WindowClosed or Soaking; empty when the
	// coordinator has not decided anything for the cluster yet. Message says why.
	State   string `json:"state,omitempty"`
	Message string `json:"message,omitempty"`
	// Failures are the failed nodes recorded against the failure budget
	// ("node: cause", "node (pool P): cause" for a named fleet pool); a changed spec makes the coordinator stop counting them.
	Failures []string `json:"failures,omitempty"`
	// Windows is the Cluster's maintenance-windows annotation; WindowOpen and
	// NextOpening are computed from it (nil / empty without the annotation).
	Windows     string     `json:"windows,omitempty"`
	WindowOpen  *bool      `json:"windowOpen,omitempty"`
	NextOpening *time.Time `json:"nextOpening,omitempty"`
	WindowError string     `json:"windowError,omitempty"`
	// DownloadWindows is the Cluster's download-windows annotation (when staging
	// ahead of a closed maintenance window may begin); DownloadWindowOpen and
	// DownloadNextOpening are computed from it (nil / empty without it).
	DownloadWindows     string     `json:"downloadWindows,omitempty"`
	DownloadWindowOpen  *bool      `json:"downloadWindowOpen,omitempty"`
	DownloadNextOpening *time.Time `json:"downloadNextOpening,omitempty"`
	DownloadWindowError string     `json:"downloadWindowError,omitempty"`
	// Staged lists the Machines whose update is staged on the node ahead of a
	// closed maintenance window and waits for it (machinestate.Staged);
	// StagedAndWaiting is true when the Cluster's update as a whole is
	// (machinestate.StagedAndWaiting: nothing else of it under way).
	Staged           []string `json:"staged,omitempty"`
	StagedAndWaiting bool     `json:"stagedAndWaiting,omitempty"`
	// Cancelled and RetryRequested list Machines carrying the cancel or retry annotation.
	Cancelled      []string `json:"cancelled,omitempty"`
	RetryRequested []string `json:"retryRequested,omitempty"`
	// RecordError is set when the coordinator's fleet record does not decode.
	RecordError string `json:"recordError,omitempty"`
}

func buildFleet(c *clusterv1.Cluster, machines []clusterv1.Machine, now time.Time) FleetView {
	fv := FleetView{Guard: "on"}
	if c.Annotations[inplacev1.GuardAnnotation] == inplacev1.GuardDisabled {
		fv.Guard = "off"
	}
	if cond := condition(c, inplacev1.InPlaceUpdateCondition); cond != nil {
		switch cond.Reason {
		case inplacev1.ReasonActive:
			fv.State = FleetActive
		case inplacev1.ReasonPaused:
			fv.State = FleetPaused
		case inplacev1.ReasonHalted:
			fv.State = FleetHalted
		case inplacev1.ReasonWindowClosed:
			fv.State = FleetWindowClosed
		case inplacev1.ReasonSoaking:
			fv.State = FleetSoaking
		}
		if fv.State != "" {
			fv.Message = cond.Message
		}
	}
	if c.Annotations[inplacev1.PausedAnnotation] == "true" && fv.State != FleetPaused {
		fv.State, fv.Message = FleetPaused, "cluster is paused for in-place updates"
	}
	st, err := fleet.Decode(c.Annotations[inplacev1.FleetStateAnnotation])
	if err != nil {
		fv.RecordError = err.Error()
	}
	for _, f := range st.Failures {
		who := f.Node
		if f.Pool != "" { // pools of different names keep separate budgets
			who += " (pool " + f.Pool + ")"
		}
		fv.Failures = append(fv.Failures, who+": "+f.Cause)
	}
	if w, ok := c.Annotations[inplacev1.MaintenanceWindowsAnnotation]; ok {
		fv.Windows = w
		sched, err := fleet.ParseWindows(w)
		if err != nil {
			fv.WindowError = err.Error()
		} else {
			v := sched.At(now, st.ExpectedDuration(fleet.DefaultExpectedDuration))
			open := v.Start
			fv.WindowOpen = &open
			if !v.Start && !v.NextOpening.IsZero() {
				next := v.NextOpening.UTC()
				fv.NextOpening = &next
			}
		}
	}
	if w, ok := c.Annotations[inplacev1.DownloadWindowsAnnotation]; ok && w != "" {
		fv.DownloadWindows = w
		sched, err := fleet.ParseWindows(w)
		if err != nil {
			fv.DownloadWindowError = err.Error()
		} else {
			v := sched.At(now, 0)
			open := v.Start
			fv.DownloadWindowOpen = &open
			if !v.Start && !v.NextOpening.IsZero() {
				next := v.NextOpening.UTC()
				fv.DownloadNextOpening = &next
			}
		}
	}
	var states []machinestate.State
	for i := range machines {
		m := &machines[i]
		st := machinestate.Of(m).State
		states = append(states, st)
		if st == machinestate.Staged {
			fv.Staged = append(fv.Staged, m.Name)
		}
		if _, ok := m.Annotations[inplacev1.CancelAnnotation]; ok {
			fv.Cancelled = append(fv.Cancelled, m.Name)
		}
		if _, ok := m.Annotations[inplacev1.RetryAnnotation]; ok {
			fv.RetryRequested = append(fv.RetryRequested, m.Name)
		}
	}
	fv.StagedAndWaiting = machinestate.StagedAndWaiting(states)
	slices.Sort(fv.Staged)
	slices.Sort(fv.Cancelled)
	slices.Sort(fv.RetryRequested)
	return fv
}

// fleetReason reports whether a reason of the Cluster's InPlaceUpdate condition is
// the fleet controls' (shown as the fleet state, not as the condition line).
func fleetReason(reason string) bool {
	switch reason {
	case inplacev1.ReasonActive, inplacev1.ReasonPaused, inplacev1.ReasonHalted, inplacev1.ReasonWindowClosed, inplacev1.ReasonSoaking:
		return true
	}
	return false
}
