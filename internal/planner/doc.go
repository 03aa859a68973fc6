// Package planner decides which part of a Machine or MachineSet change capi-inplace
// can apply to a running node. It answers CAPI's CanUpdateMachine and
// CanUpdateMachineSet hooks: given the current and desired objects of a hook
// request, it returns RFC 6902 JSON patches that make current equal desired on
// exactly the fields we can apply in place, and a Decision (field, covered, reason)
// for every field that differs.
//
// How CAPI uses the answer (v1.14, read from upstream): it applies each patch to its
// own copy of `current`, with whole-object paths (/spec/version,
// /spec/template/spec/files, ...), keeps only `spec` (Machine, InfraMachine,
// KubeadmConfig) or `spec.template.spec` (MachineSet and templates), and compares
// the result with `desired`. Machine fields that CAPI itself leaves out of that
// comparison (inplace.CleanupMachineSpecForDiff: clusterName, bootstrap,
// infrastructureRef, providerID, minReadySeconds, readinessGates, deletion
// timeouts, taints) are therefore neither patched nor reported here. When any
// difference stays uncovered CAPI replaces the machine instead, so a partial answer
// is safe: the patches say what we could do, the decisions say why not the rest.
//
// Invariants:
//   - Pure: no I/O, no context, no clock; the same input always gives the same output.
//   - A field is covered only when a rule names it; everything else is refused with
//     a reason that names the object kind and the field.
//   - Patches touch only covered fields, so applying them to current changes
//     nothing else.
//
// Tests: table tests per rule, and testdata/*.yaml scenarios holding whole hook
// requests as CAPI builds them (KCP minor upgrade, upstream's files e2e, an OS image
// change) with the expected decisions and patches.
//
// Imports: standard library, apimachinery (unstructured, runtime.DeepCopyJSONValue),
// gomodules.xyz/jsonpatch/v2, internal/policy, internal/protocol (the host-value
// rules the agent applies too), api/v1alpha1.
package planner
