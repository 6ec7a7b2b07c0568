package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// TestMain lets the test binary be the felt group's client process, as
// jetway-bench is with its hidden argument: the felt tests start this same
// binary with FeltClientArg (testClientCommand).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == FeltClientArg {
		if err := FeltClient(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testClientCommand starts this test binary as the felt client.
func testClientCommand(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, FeltClientArg}
}
