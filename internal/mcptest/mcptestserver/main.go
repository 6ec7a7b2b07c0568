// Command mcptestserver serves package mcptest's test server over stdio,
// as an MCP server program does. Tests build it (mcptest.Build).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"jetway/internal/mcptest"
)

func main() {
	if err := mcptest.NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptestserver:", err)
		os.Exit(1)
	}
}
