# The two releases of the real-node lane: the cluster is created at FROM_VERSION and
# upgraded in place to TO_VERSION. The patch levels are the ones the Go module proxy
# serves (k8s.io/kubernetes v1.35.4 is the only 1.35 release there).
FROM_VERSION=v1.35.4
TO_VERSION=v1.36.3
