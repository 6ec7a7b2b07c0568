// Package containertest runs jetway's container deployment for real: it
// builds the images with scripts/images.sh, brings the compose deployment
// up in podman with scripts/containers.sh (three NATS nodes with TLS and the
// least-privilege users, provisioning, the dispatcher, two runners, a jobs
// worker, the notifier), and checks it through its front door and its bus.
//
// It needs podman (and, for the first build of the Debian base, root and
// debootstrap). Without podman the tests skip and say so;
// JETWAY_CONTAINER_TESTS=1 makes that a failure instead (CI sets it once it
// has installed podman), JETWAY_CONTAINER_TESTS=0 skips them even where
// podman is installed.
//
// The package has no code of its own; it exists for its tests.
package containertest
