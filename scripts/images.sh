#!/usr/bin/env bash
# images.sh — build jetway's container images with whatever this machine
# allows, and say which route it took (docs/OPERATIONS.md, "Container
# images"):
#
#   registry-free (podman and debootstrap present; the default then): the
#     binaries are compiled here with `go build` (static, CGO_ENABLED=0) and
#     copied into images that need no registry: jetway:dev and
#     jetway-nats:dev FROM scratch, jetway-jobs:dev FROM a local Debian base
#     (debootstrap --variant=minbase from the apt mirror, imported with
#     `podman import` as localhost/jetway-debian:bookworm, built once and
#     kept). Only a Debian mirror and the Go module proxy are needed.
#   registry (docker or podman, and a reachable image registry): the
#     Dockerfile's targets, jetway:dev and jetway-jobs:dev; the compose file
#     pulls nats itself.
#
# Environment:
#   JETWAY_IMAGES=registry-free|registry   force a route
#   JETWAY_IMAGE_TAG (default dev)          tag of the three images
#   JETWAY_DEBIAN_MIRROR                    default: this host's apt mirror, else deb.debian.org
#   JETWAY_DEBIAN_SUITE (default bookworm)  the base's Debian release
#   JETWAY_REBUILD_BASE=1                   build the Debian base again
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/podman.sh
. "$ROOT/scripts/podman.sh"

TAG=${JETWAY_IMAGE_TAG:-dev}
SUITE=${JETWAY_DEBIAN_SUITE:-bookworm}
BASE=localhost/jetway-debian:$SUITE
OUT=$ROOT/.images
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
# The userland jobs get besides minbase's (bash, coreutils, findutils, grep,
# sed, …): git and TLS roots for what sessions fetch, tini to reap.
BASE_PACKAGES=ca-certificates,git,tini

say() { printf 'images: %s\n' "$*"; }
die() { printf 'images: %s\n' "$*" >&2; exit 1; }

# route: the build this machine allows.
route() {
	if [[ -n ${JETWAY_IMAGES:-} ]]; then
		echo "$JETWAY_IMAGES"
	elif command -v podman >/dev/null && command -v debootstrap >/dev/null; then
		echo registry-free
	elif command -v podman >/dev/null || timeout 10 docker info >/dev/null 2>&1; then
		echo registry
	else
		die "no container engine: install podman (and debootstrap for the registry-free images), or docker"
	fi
}

# debian_mirror: JETWAY_DEBIAN_MIRROR, else the mirror this host's apt uses
# for its main archive, else deb.debian.org.
debian_mirror() {
	local m=${JETWAY_DEBIAN_MIRROR:-}
	if [[ -z $m ]]; then
		m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
			awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}')
	fi
	if [[ -z $m ]]; then
		m=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
			/etc/apt/sources.list 2>/dev/null || true)
	fi
	echo "${m:-http://deb.debian.org/debian}"
}

# debian_base: the local Debian base of the jobs image, built once. The
# root is prepared before the import (the jobs user, its home, no apt
# lists), so no image build step has to run a container.
debian_base() {
	if [[ -z ${JETWAY_REBUILD_BASE:-} ]] && "${PODMAN[@]}" image exists "$BASE"; then
		say "Debian base $BASE exists (JETWAY_REBUILD_BASE=1 builds it again)"
		return
	fi
	[[ $(id -u) == 0 ]] || die "debootstrap needs root to build the Debian base $BASE"
	local mirror root
	mirror=$(debian_mirror)
	root=$(mktemp -d "${TMPDIR:-/tmp}/jetway-debian.XXXXXX")
	# shellcheck disable=SC2064 # expand now: the path is fixed
	trap "rm -rf '$root'" EXIT
	say "debootstrap --variant=minbase $SUITE from $mirror (+ ${BASE_PACKAGES//,/ })"
	debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$root" "$mirror" >"$OUT/debootstrap.log" 2>&1 ||
		die "debootstrap failed; see $OUT/debootstrap.log"
	chroot "$root" groupadd --gid 10001 jetway
	chroot "$root" useradd --uid 10001 --gid 10001 --home-dir /var/lib/jetway --no-create-home --shell /bin/bash jetway
	install -d -o 10001 -g 10001 -m 0755 "$root/var/lib/jetway" "$root/var/lib/jetway/jobs"
	# No apt lists or caches, logs, manuals or translations in an image
	# (the copyright notices stay).
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/log/* \
		"$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
	find "$root/usr/share/doc" -type f ! -name copyright -delete
	tar -C "$root" --numeric-owner -c . |
		"${PODMAN[@]}" import -q --change 'CMD ["/bin/bash"]' --message "debootstrap --variant=minbase $SUITE + $BASE_PACKAGES" - "$BASE" >/dev/null
	rm -rf "$root"
	trap - EXIT
	say "imported the Debian base as $BASE"
}

# binaries: jetway, the provisioner and nats-server (the version go.mod
# pins), static, each into the build context of the image that holds it.
binaries() {
	say "go build (static): jetway, jetway-provision, nats-server"
	mkdir -p "$OUT/service" "$OUT/nats" "$OUT/jobs"
	# One go build for the three: their shared packages compile once and
	# the links run side by side. main.version exists in jetway only; the
	# linker ignores it in the others.
	rm -rf "${OUT:?}/bin" && mkdir -p "$OUT/bin"
	# The jobs worker's confinement helper first: jetway embeds it (tag
	# jetway_confiner) and runs it from memory.
	"${CC:-cc}" -O2 -static -nostdlib -fno-stack-protector -s -Wall -Werror -o pkg/tasks/proctree/confiner/jetway-confine pkg/tasks/proctree/confiner/confine.c
	CGO_ENABLED=0 go build -trimpath -tags jetway_confiner -ldflags "-s -w -X main.version=$VERSION" -o "$OUT/bin/" \
		./cmd/jetway ./deploy/provision github.com/nats-io/nats-server/v2
	mv "$OUT/bin/provision" "$OUT/bin/jetway-provision"
	ln -f "$OUT/bin/jetway" "$OUT/service/jetway"
	ln -f "$OUT/bin/jetway-provision" "$OUT/service/jetway-provision"
	ln -f "$OUT/bin/nats-server" "$OUT/nats/nats-server"
	ln -f "$OUT/bin/jetway" "$OUT/jobs/jetway"
}

# build NAME ARGS...: podman build -t NAME ARGS, and the image NAME named
# before removed when nothing else uses it, so rebuilds leave no untagged
# images behind.
build() {
	local name=$1 old new
	shift
	old=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)
	new=$("${PODMAN[@]}" build -q -t "$name" "$@")
	if [[ -n $old && $old != "$new"* ]]; then
		"${PODMAN[@]}" rmi "$old" >/dev/null 2>&1 || true
	fi
}

registry_free() {
	mkdir -p "$OUT"
	debian_base
	binaries
	build "jetway:$TAG" -f deploy/images/Containerfile.service "$OUT/service"
	build "jetway-nats:$TAG" -f deploy/images/Containerfile.nats "$OUT/nats"
	build "jetway-jobs:$TAG" --build-arg "BASE=$BASE" -f deploy/images/Containerfile.jobs "$OUT/jobs"
	say "built jetway:$TAG, jetway-nats:$TAG, jetway-jobs:$TAG without a registry (route: registry-free)"
	"${PODMAN[@]}" images --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' |
		grep -E "/jetway(-nats|-jobs)?:$TAG |/jetway-debian:$SUITE " || true
}

registry() {
	# docker where its daemon answers (a docker client alone cannot build).
	local engine=podman
	if command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; then engine=docker; fi
	local cmd=("$engine")
	[[ $engine == podman ]] && cmd=("${PODMAN[@]}")
	say "building the Dockerfile's images with $engine: this needs an image registry$(command -v debootstrap >/dev/null || echo "; install debootstrap (and podman) for the registry-free route")"
	"${cmd[@]}" build --build-arg "VERSION=$VERSION" -t "jetway:$TAG" --target service .
	"${cmd[@]}" build --build-arg "VERSION=$VERSION" -t "jetway-jobs:$TAG" --target jobs .
	say "built jetway:$TAG and jetway-jobs:$TAG from the Dockerfile with $engine (route: registry)"
}

way=$(route) || exit 1
case $way in
registry-free) registry_free ;;
registry) registry ;;
*) die "JETWAY_IMAGES=$way: want registry-free or registry" ;;
esac
