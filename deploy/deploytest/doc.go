// Package deploytest holds the tests of jetway's deployment: real
// nats-server processes, built from the pinned module version, run with the
// configuration in deploy/nats (rendered into a temporary directory with
// free ports and fresh secrets), and checked for what the deployment
// promises: least-privilege permissions, TLS only, and no lost event when a
// node dies. It also checks the container manifests offline.
//
// The package has no code of its own; it exists for its tests.
package deploytest
