// Command mcptestserver serves package mcptest's test server over stdio,
// as an MCP server program does; with the argument "noisy" it serves the
// noisy server instead (mcptest.ServeNoisyStdio). Tests build it
// (mcptest.Build).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"jetway/internal/mcptest"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "noisy" {
		if err := mcptest.ServeNoisyStdio(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "mcptestserver:", err)
			os.Exit(1)
		}
		return
	}
	if err := mcptest.NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptestserver:", err)
		os.Exit(1)
	}
}
