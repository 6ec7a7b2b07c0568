#!/usr/bin/env bash
# make run: the whole system on one machine. Starts `jetway dev` in the
# background with its logs in $DATA/jetway.log, waits until /readyz passes,
# then opens `jetway chat` on session demo in this terminal. When the chat
# ends (or this script is interrupted), the dev process is stopped.
#
# Settings (environment): JETWAY_BIN (bin/jetway), JETWAY_DATA (.jetway),
# JETWAY_HTTP (127.0.0.1:8080), JETWAY_NATS (127.0.0.1:4222; port 0 = any
# free port), JETWAY_SESSION (demo), JETWAY_READY_TIMEOUT (seconds, 120).
set -euo pipefail

BIN=${JETWAY_BIN:-bin/jetway}
DATA=${JETWAY_DATA:-.jetway}
HTTP_ADDR=${JETWAY_HTTP:-127.0.0.1:8080}
NATS_ADDR=${JETWAY_NATS:-127.0.0.1:4222}
SESSION=${JETWAY_SESSION:-demo}
READY_TIMEOUT=${JETWAY_READY_TIMEOUT:-120}
LOG=$DATA/jetway.log

# http_ok URL: true when URL answers 200 within 2 s (curl, else bash's /dev/tcp).
http_ok() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS -m 2 -o /dev/null "$1" 2>/dev/null
		return
	fi
	local rest=${1#http://}
	local hostport=${rest%%/*} path=/${rest#*/}
	timeout 2 bash -c 'exec 3<>"/dev/tcp/${0%:*}/${0##*:}" &&
		printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$1" "$0" >&3 &&
		head -n1 <&3 | grep -q " 200 "' "$hostport" "$path" 2>/dev/null
}

# dev_line PREFIX: the rest of the first line dev printed starting with PREFIX.
dev_line() {
	sed -n "s/^$1//p" "$LOG" | head -n1
}

if [ ! -x "$BIN" ]; then
	echo "run.sh: $BIN is not built; run \`make run\` (or \`make build\`) from the repository root" >&2
	exit 1
fi

# running_dev_url: the URL of the jetway dev holding $DATA (it keeps its
# pid and URL in $DATA/dev.lock while it runs), when it answers.
running_dev_url() {
	local url
	[ -s "$DATA/dev.lock" ] || return 1
	url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$DATA/dev.lock")
	[ -n "$url" ] && http_ok "$url/healthz" && echo "$url"
}

# A jetway dev of this data directory already running (another `make run`,
# whatever its ports): attach to it; two on one store would corrupt it.
if url=$(running_dev_url); then
	echo "jetway is already running at $url with data in $DATA; attaching a chat to session $SESSION (it keeps running when you leave)"
	exec "$BIN" chat --url "$url" --tokens-file "$DATA/tokens.json" "$SESSION"
fi

# Something else serves the port: not a dev of this data directory.
if [ "${HTTP_ADDR##*:}" != 0 ] && http_ok "http://$HTTP_ADDR/healthz"; then
	echo "run.sh: something already serves http://$HTTP_ADDR, and it is not the jetway dev of $DATA." >&2
	echo "Stop it, or pick other ports: JETWAY_HTTP=127.0.0.1:8081 JETWAY_NATS=127.0.0.1:4223 make run" >&2
	exit 1
fi

mkdir -p "$DATA"
[ -f "$LOG" ] && mv -f "$LOG" "$LOG.1"
: >"$LOG"

dev_pid=
stop_dev() {
	[ -n "$dev_pid" ] || return 0
	if kill -0 "$dev_pid" 2>/dev/null; then
		echo "stopping jetway dev…"
		kill -TERM "$dev_pid" 2>/dev/null || true
		for _ in $(seq 1 200); do
			kill -0 "$dev_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$dev_pid" 2>/dev/null || true
	fi
	wait "$dev_pid" 2>/dev/null || true
	dev_pid=
	echo "jetway dev stopped (its log: $LOG)"
}
trap stop_dev EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

echo "starting jetway dev (embedded NATS + dispatcher, runner, jobs worker, notifier); logs in $LOG"
"$BIN" dev --data "$DATA" --http "$HTTP_ADDR" --nats "$NATS_ADDR" --log-format json </dev/null >>"$LOG" 2>&1 &
dev_pid=$!

# Wait for /readyz, showing dev's own progress lines while it takes a while.
start=$SECONDS
shown=
url=
while :; do
	if ! kill -0 "$dev_pid" 2>/dev/null; then
		echo "jetway dev exited before it was ready; the end of $LOG:" >&2
		tail -n 20 "$LOG" >&2
		if grep -q "address already in use" "$LOG"; then
			echo "a port is taken: is another jetway running? Pick others with JETWAY_HTTP=127.0.0.1:8081 JETWAY_NATS=127.0.0.1:4223 make run" >&2
		fi
		exit 1
	fi
	if [ -z "$url" ]; then
		url=$(dev_line "http: " | cut -d' ' -f1)
	fi
	if [ -n "$url" ] && http_ok "$url/readyz"; then
		break
	fi
	elapsed=$((SECONDS - start))
	if [ "$elapsed" -ge "$READY_TIMEOUT" ]; then
		echo "jetway dev is not ready after ${READY_TIMEOUT}s; the end of $LOG:" >&2
		tail -n 20 "$LOG" >&2
		exit 1
	fi
	if [ "$elapsed" -ge 2 ]; then
		# dev's progress lines are the ones that are not JSON log records.
		last=$(grep -v '^{' "$LOG" | tail -n1 || true)
		if [ -n "$last" ] && [ "$last" != "$shown" ]; then
			echo "  … $last"
			shown=$last
		fi
	fi
	sleep 0.2
done

model=$(dev_line "model: ")
attach=$(dev_line "chat: ")
attach=${attach/#jetway /$BIN }
attach=${attach/SESSION/$SESSION}
echo
echo "jetway is ready at $url"
echo "  model: $model"
case $model in
script\ demo.json*)
	echo "         (set ANTHROPIC_API_KEY, or OPENAI_API_KEY / OPENAI_BASE_URL with OPENAI_MODEL, for a real model)"
	echo "  type:  build the project"
	echo "         the agent starts the build as a background job, keeps working, and reports when the job exits"
	;;
*)
	echo "  type:  run \`sleep 3; echo build ok\` in the background and tell me when it is done"
	;;
esac
echo "  tools: $(dev_line "tools: ")"
echo "  more terminals: $attach"
# A one-time sign-in link (a code, never the token, in its fragment): the
# console opens signed in without a token copied out of tokens.json.
if console=$("$BIN" console --url "$url" --tokens-file "$DATA/tokens.json" 2>/dev/null | head -n1) && [ -n "$console" ]; then
	echo "  web console: $console"
	echo "         (signs in once, within 2 minutes; \`$BIN console\` prints another)"
else
	echo "  web console: $url/ (\`$BIN console\` prints a sign-in link)"
fi
echo "  leave: /quit or Ctrl-D (this stops jetway dev too); /help lists the commands"
echo

status=0
"$BIN" chat --url "$url" --tokens-file "$DATA/tokens.json" "$SESSION" || status=$?
exit "$status"
