// Package artifact fetches the files a node plan names by source and digest (the
// kubeadm and kubelet of a version, an OS bundle) into a content-addressed store on
// the host (protocol.ArtifactPath), before the node is disturbed.
//
// A file enters the store only verified: it is downloaded beside its final name,
// hashed while written, size-bounded, fsynced and renamed into place only when its
// SHA-256 is the digest the plan names. A source is an http(s) URL or an OCI
// repository whose blob of that digest is the file (oci://, oci+http://); mirrors
// are tried first. A declared size (protocol.BinaryArtifact.Size) bounds the body
// exactly, else DefaultMaxBytes does; a source host's CA bundle is the only trust
// for fetches from it, and redirects never leave TLS for plain http (redirect.go);
// a registry login is never sent over oci+http (oci.go). An executable is also checked to be built for the node's
// architecture (its ELF header), so a mislabelled binary fails here rather than
// after the node was drained. A full disk is found before the download (free space
// against the announced size) or while writing (ENOSPC), and leaves no partial file.
//
// The store is the agent's one download path: the installer (internal/agent/kube)
// takes kubeadm and kubelet from it (Store.Fetch, a no-op for a staged file), so the
// disruptive part of an update copies from local disk instead of downloading.
//
// Imports: the standard library, go-containerregistry (authn, name, remote) for OCI
// registries, internal/atomicfile, internal/protocol.
package artifact
