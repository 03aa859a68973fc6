// Package policy holds the operator's policy for in-place updates: which
// infrastructure fields carry a node's OS image and which are harmless, which OS
// artifact each image value stands for, whether bootstrap-only KubeadmConfig fields
// may change as no-ops, how nodes are drained, which OS backend a cluster's
// nodes use, and where each node platform downloads kubeadm and kubelet of a
// Kubernetes version (URL and sha256 digest).
//
// A Policy is built only by New (or Parse, or Builtin), which validates it; it is
// immutable afterwards and safe for concurrent use. Built-in entries cover the
// common infrastructure providers; a config file adds kinds (or replaces a
// built-in kind's entry) and names artifacts.
//
// Invariants: an image value is resolvable only to an artifact with a non-empty
// ref, a known backend and a sha256 digest; Kubernetes binaries are listed only
// with an http(s) URL and a sha256 digest for a known platform; anything less is
// reported, never guessed. The digest format has one rule, protocol.ValidDigest.
//
// Imports: standard library, apimachinery (unstructured, label selectors, name validation), sigs.k8s.io/yaml,
// internal/fleet (maintenance windows, budgets), internal/celgate (CEL gate
// expressions are compiled at load),
// internal/protocol, internal/backend/registry (to validate a pool's OS backend
// configuration). No I/O: the caller reads the file and hands Parse its bytes.
package policy
