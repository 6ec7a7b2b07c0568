// Package deploytest holds the tests of jetway's deployment: real
// nats-server processes, built from the pinned module version, run with the
// configuration in deploy/nats (rendered into a temporary directory with
// free ports and fresh secrets and tenant credentials), and checked for
// what the deployment promises: each tenant in an account of its own that
// no reply, subject or header leaves, least-privilege permissions between
// the services, TLS only, no lost event when a node dies, and nothing
// pending lost by an upgrade. It also checks the container manifests
// offline.
//
// The package has no code of its own; it exists for its tests.
package deploytest
