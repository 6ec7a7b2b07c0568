# syntax=docker/dockerfile:1
#
# jetway images, from one multi-stage build (see docs/OPERATIONS.md):
#   docker build -t jetway .                      # dispatcher, runner, notifier, provision
#   docker build -t jetway-jobs --target jobs .   # jobs workers: a userland for the shell jobs they run
# Both hold one static binary (CGO_ENABLED=0) and run as a non-root user.
# This build needs an image registry (golang, alpine, distroless). Without
# one, `make images` builds the same images from binaries compiled on the
# host, scratch and a local Debian base (deploy/images, scripts/images.sh);
# it takes this route itself where only docker is installed.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ENV CGO_ENABLED=0
# The jobs worker's confinement helper first (static C without a C
# library; the golang image has gcc and the kernel headers): jetway embeds it (tag
# jetway_confiner) and runs it from memory.
RUN gcc -O2 -static -nostdlib -fno-stack-protector -s -Wall -Werror -o pkg/tasks/proctree/confiner/jetway-confine pkg/tasks/proctree/confiner/confine.c \
 && go build -trimpath -tags jetway_confiner -ldflags "-s -w -X main.version=${VERSION}" -o /out/jetway ./cmd/jetway \
 && go build -trimpath -ldflags "-s -w" -o /out/jetway-provision ./deploy/provision

# Jobs workers run people's shell commands, so they need a shell and the
# usual tools; add what your sessions expect (git, make, compilers) here.
FROM alpine:3.22 AS jobs
RUN apk add --no-cache bash coreutils findutils grep sed gawk git ca-certificates tini \
 && adduser -D -u 10001 -h /var/lib/jetway jetway \
 && mkdir -p /var/lib/jetway/jobs && chown -R jetway:jetway /var/lib/jetway
COPY --from=build /out/jetway /usr/local/bin/jetway
USER 10001:10001
WORKDIR /var/lib/jetway
VOLUME ["/var/lib/jetway/jobs"]
# tini reaps what escapes a job's process group if the worker itself dies.
ENTRYPOINT ["/sbin/tini", "--", "/usr/local/bin/jetway"]
CMD ["jobs-worker", "--root", "/var/lib/jetway/jobs"]

# Everything else: no shell, no package manager, nothing but the binary.
FROM gcr.io/distroless/static-debian12:nonroot AS service
COPY --from=build /out/jetway /out/jetway-provision /usr/local/bin/
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/jetway"]
CMD ["--help"]
