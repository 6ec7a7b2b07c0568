// Command jetway-bench measures jetway next to raw JetStream measured in the
// same run (docs/BENCHMARKS.md); `make bench` builds and runs it.
//
// It is its own command, not a `jetway` subcommand, so that the production
// binary links none of the bench harness or the test fakes it drives
// (internal/bench, pkg/llm/llmtest, net/http/httptest, testing): a binary
// that ships should not carry them. A build tag would have kept one main,
// but the figures that start real processes (a runner SIGKILLed, a jobs
// worker's peak RSS) must run the jetway binary that ships, not one with
// the bench linked in: RSS counts the binary's mapped text. So the bench
// starts the production binary it is given with --jetway.
package main

import (
	"context"
	"fmt"
	"os"

	"jetway/internal/bench/benchcmd"
)

func main() {
	if err := benchcmd.New().ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "jetway-bench:", err)
		os.Exit(1)
	}
}
