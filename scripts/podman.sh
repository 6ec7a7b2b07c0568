# shellcheck shell=bash
# podman.sh — sourced by scripts/images.sh and scripts/containers.sh: how
# podman is run on hosts like the ones jetway is developed on, so the
# settings are made in one place, not left to the reader.
#
# --runtime runc: crun, podman's default where it is installed, refuses to
#   run on a host whose cgroups are in hybrid mode (v1 and v2 mounted
#   together); runc runs there.
# --ulimit: podman's default limits (nofile 1048576) exceed the hard limits
#   of hosts that cap them lower, and runc then fails to start the container
#   ("error setting rlimits ... operation not permitted"). 4096 open files
#   and processes are far above what one jetway service uses and below any
#   hard limit seen; JETWAY_ULIMITS overrides them ("nofile=N:N nproc=N:N").

# PODMAN is the podman command line every call uses.
PODMAN=(podman)
if command -v runc >/dev/null 2>&1; then
	PODMAN+=(--runtime "$(command -v runc)")
fi

# ULIMIT_ARGS are the --ulimit flags of every `podman run`.
ULIMIT_ARGS=()
for _u in ${JETWAY_ULIMITS:-nofile=4096:4096 nproc=4096:4096}; do
	ULIMIT_ARGS+=(--ulimit "$_u")
done
unset _u
