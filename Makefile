# jetway — the two commands a newcomer needs are `make run` and `make test`.
GO       ?= go
BIN      := bin/jetway
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# Every jetway binary is static: no dynamic loader, so no LD_* or
# GCONV_PATH variable of anyone's is read by it. (Not exported: the race
# detector of `make test` needs cgo.)
STATIC   := CGO_ENABLED=0
# The jobs worker's confinement helper: a small static C program without
# a C library, built first and embedded in bin/jetway (tag
# jetway_confiner), which runs it from memory. Without the tag (go test,
# go run) jetway builds it into the user's cache from its source
# (pkg/tasks/proctree/helper_build.go). It needs a C compiler and the
# kernel's headers (Debian: gcc linux-libc-dev).
CC       ?= cc
CONFINER := pkg/tasks/proctree/confiner/jetway-confine
CONFINER_CFLAGS := -O2 -static -nostdlib -fno-stack-protector -s -Wall -Werror
# The helper's system calls are written per architecture (x86_64 and
# aarch64); `make confiner-arm64` compiles the aarch64 ones with a cross
# compiler (Debian: apt-get install gcc-aarch64-linux-gnu) into bin/.
# The proctree tests also build it, and run it under qemu-aarch64-static,
# where both are installed (.ci/run installs them).
ARM64_CC ?= aarch64-linux-gnu-gcc
# The race detector and the fuzz seed corpora run in every `make test`.
TESTFLAGS ?= -race -count=1 -timeout 12m

.PHONY: all build run test lint bench fuzz clean confiner-arm64

all: build

build:
	@mkdir -p bin
	@command -v $(CC) >/dev/null || { echo "make build: no C compiler ($(CC)) for the confinement helper; install one and the kernel headers (Debian: apt-get install gcc linux-libc-dev)"; exit 1; }
	$(CC) $(CONFINER_CFLAGS) -o $(CONFINER) pkg/tasks/proctree/confiner/confine.c
	$(STATIC) $(GO) build -tags jetway_confiner -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/jetway

confiner-arm64:
	@mkdir -p bin
	@command -v $(ARM64_CC) >/dev/null || { echo "make confiner-arm64: no arm64 cross compiler ($(ARM64_CC)); Debian: apt-get install gcc-aarch64-linux-gnu"; exit 1; }
	$(ARM64_CC) $(CONFINER_CFLAGS) -o bin/jetway-confine-arm64 pkg/tasks/proctree/confiner/confine.c

# Everything on one machine: `jetway dev` (an embedded nats-server plus every
# service) in the background with its logs in .jetway/jetway.log, and a chat
# on session demo in this terminal; leaving the chat stops it (scripts/run.sh).
run:
	@echo "building $(BIN) (the first build downloads the modules and compiles everything: a few minutes on a quiet machine, ten or more on a busy 2-core one)"
	@$(MAKE) --no-print-directory build
	@JETWAY_BIN=$(BIN) scripts/run.sh

# pkg/redact runs twice: with the race detector (an eighth of its random
# rounds, pkg/redact/race_test.go) and without it, with every round, in
# a twentieth of the time the detector would take for them. The upgrade
# of a filtered log on a cluster runs only without the detector, which
# reports a data race inside nats-server there (pkg/bus/race_test.go).
test:
	$(GO) mod download
	$(GO) vet ./...
	$(GO) test $(TESTFLAGS) ./...
	$(GO) test -count=1 ./pkg/redact
	$(GO) test -count=1 -run '^TestProvision_moves_a_filtered_log_on_a_cluster_losing_no_event$$' ./pkg/bus

# gofmt, go vet, then golangci-lint with .golangci.yml (errcheck, govet,
# staticcheck, ineffassign, unused). golangci-lint is built from the module
# proxy at the pinned version (go run caches the build); when it cannot be
# built lint fails, it is never skipped.
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

clean:
	rm -rf bin .jetway $(CONFINER)

# Every figure next to raw JetStream measured in the same run (docs/BENCHMARKS.md).
# The bench is its own command, so bin/jetway links none of its harness or
# fakes; it starts bin/jetway for the figures that need real processes.
bench: build
	$(STATIC) $(GO) build -o bin/jetway-bench ./cmd/jetway-bench
	./bin/jetway-bench --jetway $(BIN) --json bench-results.json $(BENCHFLAGS)

# A real three-node JetStream cluster on loopback, no container engine needed:
# nats-server processes with deploy/nats (TLS, least-privilege users), the
# streams provisioned as admin, then each service as its own NATS user.
# State in .cluster/, secrets in deploy/secrets/ (both gitignored).
.PHONY: certs cluster cluster-down
certs:
	$(GO) run ./deploy/certs/gen -out deploy/secrets -accounts deploy/nats/accounts.conf

cluster: build certs
	./scripts/cluster.sh up

cluster-down:
	./scripts/cluster.sh down

# The chaos suite's long run: real runners, a three-node cluster, random
# faults for CHAOS_DURATION (default 10m), then the invariant checker
# (docs/CHAOS.md). CHAOS_SEED=<n> replays a schedule.
CHAOS_DURATION ?= 10m
.PHONY: chaos
chaos: build
	CHAOS_DURATION=$(CHAOS_DURATION) JETWAY_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 40m -v -run TestChaos ./test/chaos/

# Container images and the compose deployment in containers
# (docs/OPERATIONS.md, "Container images"). `make images` builds with what
# this machine allows and says which: without a registry (podman and
# debootstrap: static binaries in scratch images, the jobs image on a local
# Debian base), else from the Dockerfile. compose-up runs the
# deploy/docker-compose.yml deployment with podman (scripts/containers.sh:
# runc and ulimits set for hosts that need them); compose-down removes its
# containers and keeps the volumes (scripts/containers.sh down --volumes
# removes them too).
.PHONY: images compose-up compose-down
images:
	./scripts/images.sh

compose-up: certs
	@tag=$${JETWAY_IMAGE_TAG:-dev}; podman image exists jetway:$$tag && podman image exists jetway-nats:$$tag && podman image exists jetway-jobs:$$tag || $(MAKE) --no-print-directory images
	./scripts/containers.sh up

compose-down:
	./scripts/containers.sh down
