// Package e2e holds jetway's end-to-end tests: they build the real binary,
// start `jetway dev` (embedded NATS, dispatcher, runner, jobs worker,
// notifier) on free ports with a temporary data directory, and talk to it the
// way people and other systems do — HTTP with the tokens from
// <data>/tokens.json, CloudEvents through the SDK's HTTP client, events
// published straight onto the bus, and `jetway chat` in a real terminal.
//
// There is no library code here; the package exists for its tests.
package e2e
