# syntax=docker/dockerfile:1
# One image for both halves of capi-inplace: the extension (Deployment in the management
# cluster, `capi-inplace extension`) and the node agent (DaemonSet in each workload
# cluster, `capi-inplace agent`). Entrypoint: /capi-inplace.
#
#   docker build -t ghcr.io/capi-inplace/capi-inplace:dev --build-arg VERSION=dev .
#
# The build command below is the Makefile's `build` target plus -trimpath and a static
# binary; config/config_test.go checks that both build the same package.

FROM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
# Dependencies first, so that source edits do not invalidate the module download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/capi-inplace ./cmd/capi-inplace

# distroless/static: no shell, no package manager, CA certificates and tzdata only;
# :nonroot runs as uid/gid 65532 (the manifests' runAsUser).
FROM gcr.io/distroless/static:nonroot
COPY --from=builder /out/capi-inplace /capi-inplace
USER 65532:65532
ENTRYPOINT ["/capi-inplace"]
