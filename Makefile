# evalsi-operator. `make dev` runs the operator on a local control plane; `make test` is what CI runs.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The first run builds the control plane from the Go module proxy (about 10 minutes on 2 cores);
# later runs take it from the cache (EVALSI_CACHE_DIR, else ~/.cache/evalsi-operator).
TEST_TIMEOUT ?= 60m

# Code generators, pinned, built from the Go module proxy into the cache.
CACHE_DIR     ?= $(or $(EVALSI_CACHE_DIR),$(HOME)/.cache/evalsi-operator)
BUF           := github.com/bufbuild/buf/cmd/buf@v1.75.0
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_CONNECT := connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
TOOLS_DIR     := $(CACHE_DIR)/tools/buf-v1.75.0_go-v1.36.12_connect-v1.21.1
# The repository's own commands run with the flags go vet and the release build use, so that a
# cold run compiles their packages once.
GO_RUN        := CGO_ENABLED=0 go run -trimpath

.PHONY: dev build images push docker-build test test-race test-assets fuzz generate generate-check golden lint lint-workflows cluster bench release-dry-run

# A local control plane, the operator and the examples, with a live table of their state.
# DEV_ARGS='--context NAME' (or --kubeconfig FILE) runs against an existing cluster instead.
# Its own binary is built first, with a line every 30 s (a cold build takes minutes and go build
# prints nothing), then run in place of the shell, so that Ctrl-C reaches it. It is built with the
# control plane's flags (no cgo, -trimpath), so that the Kubernetes packages both use compile once.
dev:
	@echo "building cmd/evalsi-dev (minutes on a cold machine, seconds after)"; \
	last=$$(cat "$(CACHE_DIR)/evalsi-dev.build-seconds" 2>/dev/null); \
	CGO_ENABLED=0 go build -trimpath -o "$(CACHE_DIR)/bin/evalsi-dev" ./cmd/evalsi-dev & build=$$!; seconds=0; \
	while kill -0 $$build 2>/dev/null; do \
		sleep 1; seconds=$$((seconds + 1)); \
		if [ $$((seconds % 30)) -eq 0 ]; then \
			echo "  still building cmd/evalsi-dev: $${seconds}s so far$${last:+ (it took $${last}s last time on this machine)}"; \
		fi; \
	done; \
	wait $$build || exit 1; \
	if [ $$seconds -ge 30 ]; then echo $$seconds > "$(CACHE_DIR)/evalsi-dev.build-seconds"; fi; \
	exec "$(CACHE_DIR)/bin/evalsi-dev" $(DEV_ARGS)

# Built as the release and the tests build it (no cgo, -trimpath), so that it compiles nothing
# they have compiled.
build:
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/evalsi-operator .

# The operator image with a Docker engine: the binaries first, then the Dockerfile with their
# directory as its context (release-dry-run builds it without one).
IMAGE ?= evalsi/evalsi-operator:$(VERSION)
docker-build:
	$(GO_RUN) ./cmd/evalsi-release binaries --version $(RELEASE_VERSION) --platforms linux/$$(go env GOARCH) --out dist
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) dist

# The operator image and, FROM it, the stand-in pool and vLLM images (as `make push` builds
# them, below), written to bin/images as image archives (docker save's format) for a
# registry this machine cannot reach: docker load, podman load, ctr images import or crane push
# take them.
images:
	$(GO_RUN) ./cmd/evalsi-release images --version $(RELEASE_VERSION) --out bin/images

# The operator image and, FROM it, the stand-in pool image (testdata/pool-standin) and the
# stand-in vLLM image (testdata/model-standin), built without a daemon as the release dry run
# builds them, pushed to REGISTRY (host[:port][/path]; plain HTTP or a
# certificate this machine does not trust is accepted). bin/images/images.env then names each
# by repository and digest, for the install guide's helm --set flags.
REGISTRY ?=
push:
	@test -n "$(REGISTRY)" || { echo "make push REGISTRY=host[:port][/path]: the registry your cluster pulls from"; exit 2; }
	$(GO_RUN) ./cmd/evalsi-release push --registry "$(REGISTRY)" --version $(RELEASE_VERSION) --out bin/images

# Everything CI runs. The checks that build first, then the tests beside the fuzzers and the
# release dry run (the tests wait on their control planes for much of their time; each part's
# output is printed whole when it ends). Its release dry run builds linux/amd64 only: arm64 is the
# same build for another GOARCH, and would compile every package again on a cold machine.
test: lint generate-check test-assets lint-workflows
	@$(MAKE) --no-print-directory -j3 --output-sync=target RELEASE_PLATFORMS=linux/amd64 test-race fuzz release-dry-run

# Every test under the race detector. The packages that take longest are named first, so that
# they start first: go test runs two packages at a time on 2 cores, in the order given, and the
# operator's own (about 3 minutes) used to start last.
SLOW_TESTS := ./reconcile ./chart ./webhook ./cmd/evalsi-dev ./cluster ./kedatest
test-race:
	go test -race -trimpath -ldflags=-w -count=1 -timeout $(TEST_TIMEOUT) $(SLOW_TESTS) ./...
	cd netpol && go test -race -trimpath -ldflags=-w -count=1 ./...

# The control plane's binaries and helm, built into the cache with a line of progress each (go test
# would swallow it); a warm cache makes this a no-op.
test-assets:
	$(GO_RUN) ./cluster/cmd/evalsi-cluster -build-only

# The release workflow, linted with the pinned actionlint.
lint-workflows:
	$$($(GO_RUN) ./cluster/cmd/evalsi-cluster -tool=actionlint) -no-color .github/workflows/*.yml

# A release rehearsed here, nothing published: binaries for each platform with SBOMs; the operator
# image built without a daemon (buildah, FROM a Debian base made by debootstrap, both installed
# with apt-get when missing), run, and built upon by a plugin image; image, SBOM, charts pinned to
# the image and binaries all signed with a throwaway key by the pinned cosign and verified; the
# notes name the Kubernetes version of the control plane the tests build.
RELEASE_VERSION ?= $(if $(filter v%,$(VERSION)),$(VERSION),v0.0.0-dryrun)
RELEASE_PLATFORMS ?= linux/amd64,linux/arm64
release-dry-run:
	$(GO_RUN) ./cmd/evalsi-release dry-run --version $(RELEASE_VERSION) --platforms $(RELEASE_PLATFORMS) --out $(CACHE_DIR)/release-dry-run/$(RELEASE_VERSION)

# Each fuzzer runs a number of inputs (at most about 15 s on a 2-core machine; a failure leaves its
# input under testdata/fuzz), not a duration: a duration's deadline can fail a run that found
# nothing (golang/go#75804, unfixed in Go 1.26).
# FUZZ_SCALE multiplies them for a longer search, e.g. make fuzz FUZZ_SCALE=20.
FUZZ_SCALE ?= 1
fuzz:
	go test ./render -run '^$$' -fuzz FuzzRender -fuzztime $$((100000 * $(FUZZ_SCALE)))x
	go test ./schemas -run '^$$' -fuzz FuzzValidate -fuzztime $$((100000 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzChildWatch -fuzztime $$((30000 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzDecodeChildList -fuzztime $$((2500 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzProtobufChildWatch -fuzztime $$((30000 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzDecodeServedChild -fuzztime $$((30000 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzChildDecodersAgainstTyped -fuzztime $$((8000 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzOwnerWatch -fuzztime $$((20000 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzOwnerFromJSON -fuzztime $$((20000 * $(FUZZ_SCALE)))x
	go test ./reconcile/engine/cached -run '^$$' -fuzz FuzzCompactUID -fuzztime $$((20000 * $(FUZZ_SCALE)))x
	go test ./unstructuredjson -run '^$$' -fuzz FuzzMarshal -fuzztime $$((100000 * $(FUZZ_SCALE)))x

# Rewrite every golden file from the current code; review the diff like a pull request.
# The packages are those whose tests use internal/golden (the -update flag).
golden:
	go test -timeout $(TEST_TIMEOUT) . ./render ./chart ./internal/crdschema -run 'Golden|CommandOutput' -update

# Regenerate the Go and Connect code of apiclient/proto.
generate:
	@test -x $(TOOLS_DIR)/buf -a -x $(TOOLS_DIR)/protoc-gen-go -a -x $(TOOLS_DIR)/protoc-gen-connect-go || \
		for t in $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_CONNECT); do CGO_ENABLED=0 GOBIN=$(TOOLS_DIR) go install -trimpath $$t || exit 1; done
	cd apiclient/proto && PATH=$(TOOLS_DIR):$$PATH buf generate

# The committed generated code is what the protos give.
generate-check: generate
	@git diff --exit-code -- apiclient/evalsiv1 || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- apiclient/evalsiv1)" || { echo "generated files are not committed"; exit 1; }

# gofmt, and go vet built as a release and the tests' operator binaries are (-trimpath, no cgo),
# so that the packages it compiles are shared with them; the benchmark's peer and the NetworkPolicy
# matrix (netpol, with its engine's dependencies) are modules of their own.
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^testdata/')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	CGO_ENABLED=0 go vet -trimpath ./...
	cd bench/peer && CGO_ENABLED=0 go vet -trimpath ./...
	cd netpol && CGO_ENABLED=0 go vet -trimpath ./...

# A control plane in the foreground with the CRDs installed; Ctrl-C stops it.
cluster:
	$(GO_RUN) ./cluster/cmd/evalsi-cluster

# The operator side by side with a controller-runtime peer (bench/peer) in alternating rounds on one
# control plane (BENCH_ARGS: -rounds, -sizes, -idle, -profiles DIR), following running EvalRuns,
# bytes per cached object, the webhook's latency, and rendering with and without the schema. Takes
# about an hour on 2 cores.
BENCH_ARGS ?=
bench:
	go test -run '^$$' -bench . -benchtime 1x -timeout 3h ./bench/ -args $(BENCH_ARGS)
	go test -run '^$$' -bench . -benchtime 1x -timeout $(TEST_TIMEOUT) ./reconcile/ ./webhook/
	go test -run '^$$' -bench . -count 3 ./render/
