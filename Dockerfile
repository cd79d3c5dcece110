# syntax=docker/dockerfile:1
# The operator image: the evalsi-operator binary (operator, admission webhook, reference evalsid,
# CLI, uninstall hook) at /usr/local/bin/evalsi-operator, on Debian slim, running as the non-root
# user 65532. The platform image (the pool image) builds FROM it and adds the worker programs the
# operator's pools run (evaluator, sandboxd); plugin images build FROM that and add their tools
# with RUN apt-get ..., which is why the base has a shell and a package manager (a distroless
# base has neither). docs/image.md is the contract.
#
# The binaries are built first, as release tools do (go run ./cmd/evalsi-release binaries --out
# dist), and the build context is their directory:
#   docker buildx build --platform linux/amd64,linux/arm64 -f Dockerfile dist
# `make release-dry-run` builds this file with buildah, without a daemon, FROM a Debian base made
# from Debian's packages (BASE), runs the binary in the image and builds a plugin image FROM it.
ARG BASE=debian:trixie-slim
FROM ${BASE}
ARG TARGETARCH
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
COPY evalsi-operator-linux-${TARGETARCH} /usr/local/bin/evalsi-operator
# evalsi-guest, which pod rung trials copy in and run: the same static binary under that name.
RUN ln -s evalsi-operator /usr/local/bin/evalsi-guest
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/evalsi-operator"]
