// Package mcptest is an MCP server built with the official SDK for the
// tests of jetway's MCP support: the same tools served over stdio (the
// mcptestserver program, which Build compiles) and over streamable HTTP
// (ServeHTTP). Its tools echo, show the server's environment and pid,
// read a file, crash, hang, add a tool (tools/list_changed), return a
// picture and structured content, start a child process and ask the
// person behind the client (elicitation, ask.go); it serves a note, a
// picture and a template of resources.
package mcptest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// PNG is a 1×1 picture the picture tool returns.
var PNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

// Exported inputs and outputs of the tools.
type (
	TextIn struct {
		Text string `json:"text" jsonschema:"the text to echo"`
	}
	PathIn struct {
		Path string `json:"path" jsonschema:"a file to read"`
	}
	NameIn struct {
		Name string `json:"name" jsonschema:"the new tool's name"`
	}
	Empty   struct{}
	Weather struct {
		City    string  `json:"city"`
		Celsius float64 `json:"celsius"`
	}
)

func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// NewServer is the test server with all its tools.
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "jetway-mcptest", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes its text."}, func(_ context.Context, _ *mcp.CallToolRequest, in TextIn) (*mcp.CallToolResult, any, error) {
		return text("echo: %s", in.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Lists the server's environment."}, func(context.Context, *mcp.CallToolRequest, Empty) (*mcp.CallToolResult, any, error) {
		env := os.Environ()
		sort.Strings(env)
		return text("%s", strings.Join(env, "\n")), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "Says the server's pid."}, func(context.Context, *mcp.CallToolRequest, Empty) (*mcp.CallToolResult, any, error) {
		return text("%d", os.Getpid()), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "read", Description: "Reads a file."}, func(_ context.Context, _ *mcp.CallToolRequest, in PathIn) (*mcp.CallToolResult, any, error) {
		b, err := os.ReadFile(in.Path)
		if err != nil {
			r := text("read %s: %v", in.Path, err)
			r.IsError = true
			return r, nil, nil
		}
		return text("%s", b), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits the server at once."}, func(context.Context, *mcp.CallToolRequest, Empty) (*mcp.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "boom: crashing on purpose")
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "Answers only when the call is cancelled."}, func(ctx context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "grow", Description: "Adds a tool of that name (it echoes)."}, func(_ context.Context, _ *mcp.CallToolRequest, in NameIn) (*mcp.CallToolResult, any, error) {
		name := in.Name
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "A tool added at run time."}, func(_ context.Context, _ *mcp.CallToolRequest, in TextIn) (*mcp.CallToolResult, any, error) {
			return text("%s: %s", name, in.Text), nil, nil
		})
		return text("added %s", name), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "picture", Description: "Returns a picture."}, func(context.Context, *mcp.CallToolRequest, Empty) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a red dot"}, &mcp.ImageContent{Data: PNG, MIMEType: "image/png"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "weather", Description: "Structured weather."}, func(context.Context, *mcp.CallToolRequest, Empty) (*mcp.CallToolResult, Weather, error) {
		return nil, Weather{City: "Oslo", Celsius: -3.5}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "spawn", Description: "Starts a long sleep in a new session and says its pid."}, func(context.Context, *mcp.CallToolRequest, Empty) (*mcp.CallToolResult, any, error) {
		cmd := exec.Command("sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			r := text("spawn: %v", err)
			r.IsError = true
			return r, nil, nil
		}
		go func() { _ = cmd.Wait() }()
		return text("%d", cmd.Process.Pid), nil, nil
	})
	addResources(s)
	addAsk(s)
	return s
}

// Resources of the test server.
const (
	NoteURI  = "note://hello"
	NoteText = "hello from a resource"
	DotURI   = "note://dot"
)

// addResources gives the server a text resource, a picture and a template.
func addResources(s *mcp.Server) {
	s.AddResource(&mcp.Resource{URI: NoteURI, Name: "hello", MIMEType: "text/plain", Description: "A note."},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: NoteText}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: DotURI, Name: "dot", MIMEType: "image/png", Description: "A red dot."},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "image/png", Blob: PNG}}}, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "note://echo/{text}", Name: "echo", Description: "Reads back its text."},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			text := strings.TrimPrefix(req.Params.URI, "note://echo/")
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "echo: " + text}}}, nil
		})
}
