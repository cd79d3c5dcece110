# syntax=docker/dockerfile:1
# This repository's part of the platform image: the evalsi-operator binary (operator, admission
# webhook, reference evalsid, CLI) at /usr/local/bin/evalsi-operator, on Debian slim, running as
# the non-root user 65532. The platform image builds FROM it and adds the worker programs the
# operator's pools run (evaluator, sandboxd); plugin images build FROM that and add their tools
# with RUN apt-get ..., which is why the base has a shell and a package manager (a distroless
# base has neither). docs/image.md is the contract.
#
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 (the build stage
# cross-compiles; the binary needs no cgo).
FROM --platform=$BUILDPLATFORM golang:1.26-trixie AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/evalsi-operator .

FROM debian:trixie-slim
ARG VERSION=dev
ARG COMMIT=unknown
# The repository's URL, given by the release workflow.
ARG SOURCE=""
LABEL org.opencontainers.image.title="evalsi-operator" \
      org.opencontainers.image.description="The evals.si operator, admission webhook and reference evalsid; the base of the platform image" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 65532 evalsi \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin evalsi
COPY --from=build /out/evalsi-operator /usr/local/bin/evalsi-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/evalsi-operator"]
