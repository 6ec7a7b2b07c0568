#!/usr/bin/env bash
# containers.sh up|down|status — the deployment of deploy/docker-compose.yml
# run with podman: three NATS nodes with deploy/nats (TLS, the
# least-privilege users), provisioning as admin, the spreader, the
# dispatcher, two runners, a jobs worker and the notifier, each as its own
# NATS user, from
# the images `make images` built (docs/OPERATIONS.md, "Container images").
#
# Why a script rather than podman-compose: the podman-compose Debian ships
# (1.0.3) ignores depends_on conditions (provisioning would race the
# cluster, the services would race provisioning), wraps every healthcheck
# in /bin/sh (the scratch images have none), and has no runtime setting.
# The script runs the same containers with the same commands, mounts and
# users as the compose file, in order: nodes, provisioning to completion,
# then the services. The podman settings a host may need (runc, ulimits)
# come from scripts/podman.sh.
#
# Environment:
#   JETWAY_PROJECT (default jetway)   prefix of every container, network, volume
#   JETWAY_HTTP_PORT (default 8080)   host port of the dispatcher
#   JETWAY_NATS_PORT (default 4222)   host port of nats-1's client listener
#   JETWAY_PUBLISH_ADDR (127.0.0.1)   host address the two ports are bound to
#   JETWAY_SECRETS (deploy/secrets)   where `make certs` wrote
#   JETWAY_IMAGE_TAG (default dev)    tag of the images
#   JETWAY_STATE (.containers/<project>)  the nodes' staged configuration, tokens
#   JETWAY_ADMIN_TOKEN, JETWAY_OPERATOR_TOKEN  passed to the dispatcher when set
#   JETWAY_TOKENS                     token:tenant[,…] for the dispatcher; made
#                                     and kept in $JETWAY_STATE/tokens.env when unset
#   ANTHROPIC_API_KEY, OPENAI_*       passed to the runners when set; without
#                                     them they play the demo script
#
# Secrets stay as in the compose file: each service gets only its own NATS
# password (inside NATS_URL), the nodes the bcrypt hashes and their key.
# Values travel to podman in its environment (`-e NAME` without a value),
# never on a command line that `ps` shows.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/podman.sh
. "$ROOT/scripts/podman.sh"

P=${JETWAY_PROJECT:-jetway}
HTTP_PORT=${JETWAY_HTTP_PORT:-8080}
NATS_PORT=${JETWAY_NATS_PORT:-4222}
ADDR=${JETWAY_PUBLISH_ADDR:-127.0.0.1}
SECRETS=${JETWAY_SECRETS:-$ROOT/deploy/secrets}
TAG=${JETWAY_IMAGE_TAG:-dev}
STATE=${JETWAY_STATE:-$ROOT/.containers/$P}
LABEL=io.jetway.project=$P
# The images run as these users (deploy/images): the node's secrets are
# handed to the NATS user, the workspace volume to the jobs user.
NATS_UID=65532
NODES=(nats-1 nats-2 nats-3)

say() { printf 'containers: %s\n' "$*"; }
die() { printf 'containers: %s\n' "$*" >&2; exit 1; }

pod() { "${PODMAN[@]}" "$@"; }

# password USER: USER's NATS password from users.env.
password() {
	local var
	var="NATS_PASSWORD_$(echo "$1" | tr 'a-z-' 'A-Z_')"
	sed -n "s/^$var=//p" "$SECRETS/users.env" | head -1
}

# nats_url USER: every node, with USER's password.
nats_url() {
	local pw out="" n
	pw=$(password "$1")
	[[ -n $pw ]] || die "no password for NATS user $1 in $SECRETS/users.env (run make certs)"
	for n in "${NODES[@]}"; do out+="${out:+,}tls://$1:$pw@$n:4222"; done
	printf '%s' "$out"
}

# run NAME ARGS...: a detached container of this project, restarted when it
# dies unless it was stopped.
run() {
	local name=$1
	shift
	pod run -d --name "$P-$name" --label "$LABEL" --network "$P" --network-alias "$name" \
		"${ULIMIT_ARGS[@]}" --restart unless-stopped "$@" >/dev/null
	say "started $P-$name"
}

# service NAME USER [PODMAN-OPTIONS...] -- IMAGE ARGS...: a jetway service
# as NATS user USER, with the settings every service shares (no new
# privileges, the CA only). Its NATS_URL comes from the environment of
# `podman run`.
service() {
	local name=$1 user=$2 opts=()
	shift 2
	while [[ $1 != -- ]]; do opts+=("$1"); shift; done
	shift
	NATS_URL=$(nats_url "$user") run "$name" --security-opt no-new-privileges \
		-v "$SECRETS/ca.pem:/etc/jetway/ca.pem:ro" \
		-e NATS_URL -e NATS_CA=/etc/jetway/ca.pem -e SSL_CERT_FILE=/etc/jetway/ca.pem -e JETWAY_LOG_FORMAT=json \
		"${opts[@]}" "$@"
}

# node_config: deploy/nats and the five files of secrets/ a node needs
# (never a tenant's nkey seed: tenants.conf holds their public keys), staged in
# the state directory and owned by the image's NATS user (the key is 0600
# and root's in deploy/secrets; mounted as is it would be unreadable, and a
# file mounted into a read-only mount needs a mount point that is not there).
node_config() {
	local d=$STATE/nats f
	rm -rf "$d"
	# data/ is where the node's volume is mounted: node-N.conf stores in
	# data/node-N, relative to the working directory /etc/nats.
	mkdir -p "$d/secrets" "$d/data"
	cp "$ROOT"/deploy/nats/*.conf "$d/"
	for f in passwords.conf tenants.conf server.pem server-key.pem ca.pem; do
		[[ -f $SECRETS/$f ]] || die "no $SECRETS/$f: run make certs"
		install -m 0400 "$SECRETS/$f" "$d/secrets/$f"
	done
	chmod -R a+rX,go-w "$d"
	chmod 0500 "$d/secrets"
	if [[ $(id -u) == 0 ]]; then
		chown -R "$NATS_UID:$NATS_UID" "$d/secrets"
	else
		pod unshare chown -R "$NATS_UID:$NATS_UID" "$d/secrets"
	fi
}

# tokens: JETWAY_TOKENS, or the ones made for this project on its first up.
tokens() {
	if [[ -n ${JETWAY_TOKENS:-} ]]; then
		printf '%s' "$JETWAY_TOKENS"
		return
	fi
	if [[ ! -f $STATE/tokens.env ]]; then
		(umask 077 && printf '%s:acme\n' "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$STATE/tokens.env")
	fi
	cat "$STATE/tokens.env"
}

# wait_ready URL SECONDS: URL answers 200 within SECONDS.
wait_ready() {
	local deadline=$((SECONDS + $2))
	until curl -fsS -o /dev/null "$1" 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

up() {
	command -v podman >/dev/null || die "podman is not installed (apt-get install podman runc)"
	[[ -f $SECRETS/users.env ]] || die "no secrets in $SECRETS: run make certs"
	local img
	for img in "jetway:$TAG" "jetway-nats:$TAG" "jetway-jobs:$TAG"; do
		pod image exists "$img" || die "no image $img: run make images"
	done
	[[ -z $(pod ps -aq --filter "label=$LABEL") ]] || die "project $P has containers already: make compose-down first (or set JETWAY_PROJECT)"
	mkdir -p "$STATE"
	chmod 700 "$STATE"
	local t0=$SECONDS

	pod network exists "$P" || pod network create --label "$LABEL" "$P" >/dev/null
	node_config
	local i n routes
	for i in 0 1 2; do
		n=${NODES[$i]}
		routes=$(for m in "${NODES[@]}"; do [[ $m == "$n" ]] || printf 'nats-route://%s:6222,' "$m"; done)
		local publish=()
		[[ $n == nats-1 ]] && publish=(-p "$ADDR:$NATS_PORT:4222")
		pod volume exists "$P-$n" || pod volume create --label "$LABEL" "$P-$n" >/dev/null
		run "$n" "${publish[@]}" -w /etc/nats \
			-v "$STATE/nats:/etc/nats:ro" -v "$P-$n:/etc/nats/data:U" \
			"jetway-nats:$TAG" -c "node-$((i + 1)).conf" --addr 0.0.0.0 --http_port 8222 \
			--cluster nats://0.0.0.0:6222 --routes "${routes%,}"
	done

	# Provisioning retries until the cluster has elected its leaders, so
	# its success is also the sign the nodes are up.
	say "provisioning the streams and buckets (R3) as admin"
	local urls
	urls=$(for n in "${NODES[@]}"; do printf 'tls://%s:4222,' "$n"; done)
	NATS_URL=${urls%,} NATS_PASSWORD=$(password admin) \
		pod run --rm --name "$P-provision" --label "$LABEL" --network "$P" "${ULIMIT_ARGS[@]}" \
		--read-only --security-opt no-new-privileges -v "$SECRETS/ca.pem:/etc/jetway/ca.pem:ro" \
		-e NATS_URL -e NATS_USER=admin -e NATS_PASSWORD -e NATS_CA=/etc/jetway/ca.pem -e JETWAY_LOG_FORMAT=json \
		--entrypoint /usr/local/bin/jetway-provision "jetway:$TAG" -replicas 3 >"$STATE/provision.log" 2>&1 ||
		die "provisioning failed; see $STATE/provision.log and podman logs $P-nats-1"

	# Keeps the shards' and the busy streams' leaders spread over the nodes.
	service spreader spreader --read-only --entrypoint /usr/local/bin/jetway-provision -- "jetway:$TAG" \
		-spread-only -keep-spread 30s

	local model=()
	for v in ANTHROPIC_API_KEY ANTHROPIC_BASE_URL ANTHROPIC_MODEL OPENAI_API_KEY OPENAI_BASE_URL OPENAI_MODEL; do
		[[ -n ${!v:-} ]] && model+=(-e "$v")
	done
	local admin=()
	for v in JETWAY_ADMIN_TOKEN JETWAY_OPERATOR_TOKEN; do
		[[ -n ${!v:-} ]] && admin+=(-e "$v")
	done
	# The services' root file systems are read-only (the jobs worker's is
	# not: jobs write where their commands do); podman mounts a tmpfs on
	# /tmp (and /run, /var/tmp) of such containers itself.
	JETWAY_TOKENS=$(tokens) service dispatcher dispatcher --read-only -p "$ADDR:$HTTP_PORT:8080" -e JETWAY_TOKENS "${admin[@]}" \
		-- "jetway:$TAG" dispatcher --http 0.0.0.0:8080
	for i in 1 2; do
		service "runner-$i" runner --read-only "${model[@]}" -- "jetway:$TAG" runner --id "runner-$i"
	done
	pod volume exists "$P-workspace" || pod volume create --label "$LABEL" "$P-workspace" >/dev/null
	# Each job: 2 GiB of memory, 1024 processes, 1 h of CPU time, confined
	# with Landlock (the default seccomp profile allows its system calls);
	# a kernel without it makes the worker refuse jobs.
	service jobs-1 jobs -v "$P-workspace:/var/lib/jetway/jobs:U" -- "jetway-jobs:$TAG" \
		jobs-worker --id jobs-1 --root /var/lib/jetway/jobs --memory 2147483648 --processes 1024 --cpu-time 1h
	service notifier notifier --read-only -- "jetway:$TAG" notifier --metrics 0.0.0.0:9090

	wait_ready "http://$ADDR:$HTTP_PORT/readyz" 120 || die "the dispatcher is not ready after 120 s; see podman logs $P-dispatcher"
	say "up in $((SECONDS - t0)) s"
	cat <<EOF

jetway is up in podman (project $P).
  dispatcher  http://$ADDR:$HTTP_PORT   tokens: JETWAY_TOKENS$([[ -n ${JETWAY_TOKENS:-} ]] || echo " (in $STATE/tokens.env)")
  NATS        tls://$ADDR:$NATS_PORT (nats-1; CA $SECRETS/ca.pem)
  logs        podman logs $P-<name>   (names: podman ps --filter label=$LABEL)
Try:
  JETWAY_URL=http://$ADDR:$HTTP_PORT JETWAY_TOKEN=$(tokens | cut -d: -f1) bin/jetway send demo "hello"
Stop it with: make compose-down
EOF
}

# down [--volumes]: every container and the network of the project; the
# volumes (JetStream stores, workspaces) too with --volumes.
down() {
	local ids names services=() n
	names=$(pod ps -a --filter "label=$LABEL" --format '{{.Names}}')
	# Services first, with time to hand their sessions over while the
	# nodes still answer; then the nodes.
	for n in $names; do [[ $n == "$P"-nats-* ]] || services+=("$n"); done
	((${#services[@]} == 0)) || pod stop -t 15 "${services[@]}" >/dev/null
	ids=$(pod ps -aq --filter "label=$LABEL")
	if [[ -n $ids ]]; then
		# shellcheck disable=SC2086 # one id per word
		pod rm -f -t 15 $ids >/dev/null
		say "removed the containers of $P"
	fi
	if pod network exists "$P"; then pod network rm -f "$P" >/dev/null; fi
	if [[ ${1:-} == --volumes ]]; then
		ids=$(pod volume ls -q --filter "label=$LABEL")
		# shellcheck disable=SC2086
		[[ -z $ids ]] || pod volume rm -f $ids >/dev/null
		# Rootless, the nodes' secrets belong to a user of podman's namespace.
		if [[ $(id -u) != 0 && -d $STATE/nats ]]; then pod unshare rm -rf "$STATE/nats"; fi
		rm -rf "$STATE"
		say "removed the volumes of $P"
	else
		say "volumes kept (JetStream stores, workspaces); down --volumes removes them"
	fi
}

status() {
	pod ps -a --filter "label=$LABEL" --format '{{.Names}}\t{{.Status}}'
}

case ${1:-} in
up) up ;;
down) down "${2:-}" ;;
status) status ;;
*) die "usage: $0 up|down [--volumes]|status" ;;
esac
