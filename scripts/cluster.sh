#!/usr/bin/env bash
# cluster.sh up|down|status|reload — jetway's deployment topology as local
# processes on loopback, for machines without a container engine (see
# docs/OPERATIONS.md): three nats-server nodes with deploy/nats (TLS, the
# JETWAY account with a user per service, an account per tenant), provisioning
# as admin, then the spreader and the services, each as its own NATS user. State lives in
# .cluster/ (gitignored): pids/, logs/, nats/ (the configuration and the
# JetStream stores). `reload` makes every running node read its
# configuration again, so a tenant added or revoked (jetway tenants add
# --secrets, make certs) holds without a restart.
#
# Environment: JETWAY_RUNNERS (default 2) runners to start;
# JETWAY_HTTP (default 127.0.0.1:8080) the dispatcher's address;
# JETWAY_SECRETS (default deploy/secrets) where `make certs` wrote;
# JETWAY_CLUSTER_STATE (default .cluster) the state directory.
#
# Secrets: each service gets its own NATS user's password and nothing else.
# users.env is read into unexported shell variables, and every service
# starts with every NATS_PASSWORD* variable removed from its environment
# (inherited ones too), its own password only inside its NATS_URL. A
# compromised runner thus cannot log in as the jobs user or as admin.
# `cluster.sh service-env USER` prints exactly the environment a service of
# USER starts with (deploy/deploytest checks it).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
STATE=${JETWAY_CLUSTER_STATE:-$ROOT/.cluster}
SECRETS=${JETWAY_SECRETS:-$ROOT/deploy/secrets}
BIN=$ROOT/bin
RUNNERS=${JETWAY_RUNNERS:-2}
HTTP_ADDR=${JETWAY_HTTP:-127.0.0.1:8080}
NODES=(node-1 node-2 node-3)
CLIENT_PORTS=(4222 4223 4224)

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

alive() { # alive NAME: the process recorded in pids/NAME.pid is running
	local f=$STATE/pids/$1.pid
	[[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# urls USER: every node, with USER's password, for NATS_URL.
urls() {
	local user=$1 var pw out=""
	var="NATS_PASSWORD_$(echo "$user" | tr 'a-z-' 'A-Z_')"
	pw=${!var:-}
	[[ -n $pw ]] || die "no password for NATS user $user in $SECRETS/users.env (run make certs)"
	for p in "${CLIENT_PORTS[@]}"; do out+="${out:+,}tls://$user:$pw@127.0.0.1:$p"; done
	printf '%s' "$out"
}

# load_passwords: users.env into shell variables, never exported.
load_passwords() {
	local line
	[[ -f $SECRETS/users.env ]] || die "no secrets in $SECRETS: run make certs"
	while IFS= read -r line || [[ -n $line ]]; do
		[[ $line =~ ^(NATS_PASSWORD_[A-Z0-9_]+)=(.*)$ ]] || continue
		export -n "${BASH_REMATCH[1]}" 2>/dev/null || true
		printf -v "${BASH_REMATCH[1]}" '%s' "${BASH_REMATCH[2]}"
	done <"$SECRETS/users.env"
}

# service_env USER CMD...: run CMD with the environment a service of NATS
# user USER gets: the inherited one without any NATS password or user,
# plus its own NATS_URL (its password inside) and the CA.
service_env() {
	local user=$1 v
	shift
	local url
	url=$(urls "$user")
	local scrub=()
	for v in $(compgen -e); do
		case $v in NATS_PASSWORD* | NATS_USER | NATS_URL | NATS_TOKEN | NATS_CREDS | NATS_NKEY) scrub+=(-u "$v") ;; esac
	done
	env "${scrub[@]}" NATS_URL="$url" NATS_CA="$SECRETS/ca.pem" SSL_CERT_FILE="$SECRETS/ca.pem" \
		JETWAY_LOG_FORMAT=json "$@"
}

# has_command NAME: bin/jetway has the subcommand NAME.
has_command() {
	"$BIN/jetway" --help 2>/dev/null | awk '/^Available Commands:/{on=1;next} on&&/^$/{exit} on{print $1}' | grep -qx "$1"
}

# start NAME USER ARGS...: run `bin/jetway ARGS` in the background as NATS
# user USER, with its pid in pids/NAME.pid and its output in logs/NAME.log.
# The password travels in the environment (NATS_URL), not on the command
# line where `ps` would show it.
start() {
	local name=$1 user=$2
	shift 2
	start_bin "$name" "$user" jetway "$@"
}

# start_bin NAME USER PROGRAM ARGS...: start, for any program of bin/.
start_bin() {
	local name=$1 user=$2 prog=$3
	shift 3
	if alive "$name"; then
		say "$name already running (pid $(cat "$STATE/pids/$name.pid"))"
		return
	fi
	service_env "$user" nohup "$BIN/$prog" "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$STATE/pids/$name.pid"
	say "started $name (pid $!, NATS user $user): $prog $*"
}

# service NAME USER ARGS...: start the service if this build has it, or say
# plainly that it is skipped.
service() {
	local cmd=$3
	if has_command "$cmd"; then
		start "$@"
	else
		say "skipped $1: this bin/jetway has no '$cmd' command yet"
	fi
}

wait_healthy() { # wait_healthy PORT: the node's /healthz answers 200 (JetStream current)
	local port=$1 i
	for i in $(seq 1 300); do
		if curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; then return 0; fi
		sleep 0.2
	done
	return 1
}

up() {
	[[ -x $BIN/jetway ]] || die "no $BIN/jetway: run make build"
	[[ -f $SECRETS/users.env ]] || die "no secrets in $SECRETS: run make certs"
	# accounts.conf includes it: without it no node starts.
	[[ -f $SECRETS/tenants.conf ]] || die "no $SECRETS/tenants.conf (the tenant accounts): run make certs"
	mkdir -p "$STATE/pids" "$STATE/logs" "$STATE/nats"
	chmod 700 "$STATE"
	say "building nats-server (the version go.mod pins) and the provisioner"
	CGO_ENABLED=0 go build -o "$BIN/nats-server" github.com/nats-io/nats-server/v2
	CGO_ENABLED=0 go build -o "$BIN/jetway-provision" ./deploy/provision

	# The servers run in .cluster/nats: the config's relative paths (secrets/,
	# data/) resolve there.
	cp deploy/nats/*.conf "$STATE/nats/"
	ln -sfn "$SECRETS" "$STATE/nats/secrets"
	load_passwords

	for i in 0 1 2; do
		local n=${NODES[$i]}
		if alive "$n"; then
			say "$n already running"
			continue
		fi
		cd "$STATE/nats"
		nohup "$BIN/nats-server" -c "$n.conf" >"$STATE/logs/$n.log" 2>&1 </dev/null &
		echo $! >"$STATE/pids/$n.pid"
		cd "$ROOT"
		say "started $n (pid $(cat "$STATE/pids/$n.pid"), clients tls://127.0.0.1:${CLIENT_PORTS[$i]})"
	done
	if command -v curl >/dev/null; then
		for p in 8222 8223 8224; do
			wait_healthy "$p" || die "nats node with monitor port $p not healthy in 60s; see $STATE/logs/"
		done
		say "JetStream cluster healthy"
	fi

	service_env admin "$BIN/jetway-provision" -replicas 3 >"$STATE/logs/provision.log" 2>&1 ||
		die "provisioning failed; see $STATE/logs/provision.log"
	say "provisioned streams and buckets (R3) as admin"
	# Keeps the shards' and the busy streams' leaders spread over the nodes.
	start_bin spreader spreader jetway-provision -spread-only -keep-spread 30s

	if [[ ! -f $STATE/tokens.json ]]; then
		local tok admin operator
		tok=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
		admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
		operator=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
		umask 077
		printf '{"tokens":[{"token":"%s","tenant":"acme"},{"token":"%s","tenant":"acme","role":"admin"},{"token":"%s","role":"operator"}]}\n' \
			"$tok" "$admin" "$operator" >"$STATE/tokens.json"
	fi

	service dispatcher dispatcher dispatcher --http "$HTTP_ADDR" --tokens "$STATE/tokens.json"
	for i in $(seq 1 "$RUNNERS"); do
		service "runner-$i" runner runner --id "runner-$i"
	done
	mkdir -p "$STATE/jobs-1"
	service jobs-1 jobs jobs-worker --id jobs-1 --root "$STATE/jobs-1"
	service notifier notifier notifier

	local token
	token=$(sed -n 's/.*"token":"\([0-9a-f]*\)","tenant":"acme"}.*/\1/p' "$STATE/tokens.json" | head -1)
	cat <<EOF

jetway cluster is up.
  NATS        tls://127.0.0.1:4222,4223,4224 (CA $SECRETS/ca.pem, service users in $SECRETS/users.env)
  dispatcher  http://$HTTP_ADDR   tokens in $STATE/tokens.json
  logs        $STATE/logs/       pids $STATE/pids/
$(tenant_credentials)
Try:
  JETWAY_URL=http://$HTTP_ADDR JETWAY_TOKEN=$token bin/jetway send demo "hello"
  nats --server tls://127.0.0.1:4222 --tlsca $SECRETS/ca.pem --nkey $SECRETS/tenants/acme.nk pub jetway.events.demo '{}'
Stop it with: make cluster-down
EOF
}

# tenant_credentials: where the tenant accounts and the tenants' nkey seed
# files are, for the summaries. A tenant's users connect with a seed into
# the tenant's own account; the servers read only tenants.conf.
tenant_credentials() {
	local f found=""
	printf '  tenants     accounts in %s; credentials (nkey seeds, for the tenants'"'"' clients):\n' "$SECRETS/tenants.conf"
	for f in "$SECRETS"/tenants/*.nk; do
		[[ -e $f ]] || continue
		found=1
		printf '                %s\n' "$f"
	done
	[[ -n $found ]] || printf '                none (make certs, or jetway tenants add NAME --secrets %s)\n' "$SECRETS"
}

# reload: every running node reads its configuration again (SIGHUP, what
# `nats-server --signal reload=<pid>` sends), so a tenant added or revoked
# in $SECRETS/tenants.conf holds without a restart: a new tenant's users
# connect, a revoked user's connections are closed. The configuration is
# copied from deploy/nats again first, so an edited accounts.conf is taken
# too. A configuration a node refuses is reported with the node's reason
# (the node keeps running on the one it had).
#
# Each node reloads twice: nats-server (2.15.2) does not start the service
# import subscriptions of an account that a reload creates (configureAccounts
# starts them "only if not reloading"), so a new tenant's events and API
# requests would find no responder; the second reload finds the account
# existing and starts them. deploy/deploytest holds this
# (TestCluster_script_reload_adds_and_revokes_a_tenant_without_a_restart).
reload() {
	[[ -d $STATE/pids ]] || die "nothing running"
	[[ -f $SECRETS/tenants.conf ]] || die "no $SECRETS/tenants.conf: run make certs"
	mkdir -p "$STATE/nats"
	cp deploy/nats/*.conf "$STATE/nats/"
	local n any=""
	for n in "${NODES[@]}"; do
		if ! alive "$n"; then
			say "$n is not running: it reads the configuration when it starts"
			continue
		fi
		reload_node "$n"
		reload_node "$n"
		say "reloaded $n (pid $(cat "$STATE/pids/$n.pid"))"
		any=1
	done
	[[ -n $any ]] || die "no node is running"
	# The dispatcher reads its tokens file again on SIGHUP, so a tenant's
	# HTTP tokens added with `jetway tenants add --tokens` hold too.
	if alive dispatcher; then
		kill -HUP "$(cat "$STATE/pids/dispatcher.pid")"
		say "dispatcher (pid $(cat "$STATE/pids/dispatcher.pid")) reloads $STATE/tokens.json"
	fi
	tenant_credentials
}

# reload_node NAME: SIGHUP the node and wait up to 10 s for its log to say
# it reloaded, or that it refused the configuration.
reload_node() {
	local n=$1 pid log before failed i
	pid=$(cat "$STATE/pids/$n.pid")
	log=$STATE/logs/$n.log
	before=$(grep -c 'Reloaded server configuration' "$log" || true)
	failed=$(grep -c 'Failed to reload server configuration' "$log" || true)
	kill -HUP "$pid"
	for i in $(seq 1 100); do
		if (($(grep -c 'Reloaded server configuration' "$log" || true) > before)); then
			return 0
		fi
		if (($(grep -c 'Failed to reload server configuration' "$log" || true) > failed)); then
			die "$n (pid $pid) refused the new configuration: $(grep 'Failed to reload server configuration' "$log" | tail -1)"
		fi
		sleep 0.1
	done
	die "$n (pid $pid) did not say it reloaded within 10s; see $log"
}

# stop NAME: SIGTERM, up to 15 s to exit, then SIGKILL.
stop() {
	local name=$1 f=$STATE/pids/$1.pid pid i
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 1 75); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
			say "killed $name (pid $pid) after 15s"
		else
			say "stopped $name (pid $pid)"
		fi
	fi
	rm -f "$f"
}

down() {
	[[ -d $STATE/pids ]] || { say "nothing running"; return 0; }
	local f name
	# Services first, so they do not spend their last seconds reconnecting.
	for f in "$STATE"/pids/*.pid; do
		[[ -e $f ]] || continue
		name=$(basename "$f" .pid)
		[[ $name == node-* ]] || stop "$name"
	done
	for name in "${NODES[@]}"; do stop "$name"; done
	say "down (JetStream data kept in $STATE/nats/data; rm -rf $STATE to start afresh)"
}

status() {
	local f name
	for f in "$STATE"/pids/*.pid; do
		[[ -e $f ]] || { say "nothing running"; return 0; }
		name=$(basename "$f" .pid)
		if alive "$name"; then say "$name running (pid $(cat "$f"))"; else say "$name dead (see $STATE/logs/$name.log)"; fi
	done
}

case ${1:-} in
up) up ;;
service-env)
	[[ -n ${2:-} ]] || die "usage: $0 service-env USER"
	load_passwords
	service_env "$2" env
	;;
down) down ;;
status) status ;;
reload) reload ;;
*) die "usage: $0 up|down|status|reload" ;;
esac
