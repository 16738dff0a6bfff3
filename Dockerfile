# syntax=docker/dockerfile:1
# The operator, limiter and load generator images, for those with a Docker
# daemon. `make images` builds the same images without one
# (hack/imagebuild): static binaries, user 65532, the same entrypoints and
# labels.
#
#   docker build --target operator -t ghcr.io/sluice-dev/sluice-operator:0.1.0 --build-arg VERSION=0.1.0 .
#   docker build --target limiter  -t ghcr.io/sluice-dev/sluice-limiter:0.1.0  --build-arg VERSION=0.1.0 .
#   docker build --target loadgen  -t ghcr.io/sluice-dev/sluice-loadgen:0.1.0  --build-arg VERSION=0.1.0 .
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY limiter/ limiter/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    for c in operator limiter loadgen; do \
      CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags='-s -w' -o /out/$c ./cmd/$c || exit 1; \
    done

# distroless/static: CA certificates, /etc/passwd with nonroot (65532), /tmp;
# no shell, no package manager, no libc.
FROM gcr.io/distroless/static-debian12:nonroot AS loadgen
ARG VERSION=dev REVISION=unknown
LABEL org.opencontainers.image.title="sluice-loadgen" \
      org.opencontainers.image.description="Sluice load generator: Envoy RLS v3 load and the decisions/s and latency it gets" \
      org.opencontainers.image.source="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.url="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/loadgen /loadgen
USER 65532:65532
ENTRYPOINT ["/loadgen"]

FROM gcr.io/distroless/static-debian12:nonroot AS operator
ARG VERSION=dev REVISION=unknown
LABEL org.opencontainers.image.title="sluice-operator" \
      org.opencontainers.image.description="Sluice operator: compiles RateLimitPolicies into snapshots and runs LimiterFleets" \
      org.opencontainers.image.source="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.url="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/operator /operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/operator"]

FROM gcr.io/distroless/static-debian12:nonroot AS limiter
ARG VERSION=dev REVISION=unknown
LABEL org.opencontainers.image.title="sluice-limiter" \
      org.opencontainers.image.description="Sluice limiter: Envoy RLS v3 and HTTP rate limit service" \
      org.opencontainers.image.source="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.url="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/limiter /limiter
USER 65532:65532
EXPOSE 8080 8081 8082
ENTRYPOINT ["/limiter"]
