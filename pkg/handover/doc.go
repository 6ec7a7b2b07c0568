// Package handover decides whether interrupted work may be restarted, and
// writes what a new run is told about the run it takes over from.
//
// Two problems turn out to be the same problem. A run dies when its runner
// dies, and a person watching a run go the wrong way wants to redirect it. Both
// are tempting to solve by keeping something alive — resuming a conversation,
// piping input into a live child — and both are solved here instead by starting
// a new run and handing it what the old one had: its inputs again, the tool
// calls it made, and a brief saying why it is starting. Every run stays a clean
// slate; what changes is only how much context it opens with.
//
// A recovered or steered run is an ordinary run and spends what any run spends.
// Recovery additionally has a [RecoveryPolicy] and an attempt limit, because a
// crash loop that restarts itself forever is a fork bomb that looks like
// resilience.
//
// The package is pure: no NATS, no I/O. The runner stores its types in KV and
// in transcripts as JSON, so every enum marshals to a stable lowercase string
// and unknown strings are refused rather than guessed at.
package handover
