// Package tool is what the agent loop runs for the model: the Tool
// interface, a Registry with JSON schemas, the streaming Executor (read-only
// calls start while the model still streams, others run alone after their
// call is recorded, results come back in call order), output capture with
// spill to a file, and the todo list with its todo_write tool.
package tool

import (
	"context"
	"encoding/json"

	"jetway/pkg/llm"
)

// Call is one invocation of a tool.
type Call struct {
	// ID is the model's tool_use id.
	ID string
	// Input is the JSON object of arguments, after any hook rewrote it.
	Input json.RawMessage
	// Progress reports mid-tool progress to the host (the loop's
	// KindProgress events). It is never nil and safe from any goroutine.
	Progress func(text string)
}

// Result is what a tool hands back to the model.
type Result struct {
	Content string
	// Images are pictures the tool returns (a screenshot, a rendered
	// chart), shown to the model after Content. The provider checks them
	// before sending: one it cannot take ends the run with image_error.
	Images  []llm.Image
	IsError bool
	// Stop asks the loop to end after this tool turn instead of calling the
	// model again (the run ends with hook_stopped); StopMessage says why.
	Stop        bool
	StopMessage string
	// Stands says the result accounts for the call's interruption: the
	// tool learned what became of the call after its context ended (a
	// foreground command handed to the background, or one that never
	// started), so the executor keeps it instead of the Cancelled text.
	Stands bool
}

// Tool is something the model can call.
type Tool interface {
	// Spec is the name, description and JSON schema offered to the model.
	Spec() llm.ToolSpec
	// ReadOnly reports whether a call with this input only reads. Read-only
	// calls are concurrency-safe: they may run in parallel with each other
	// and start while the model's message is still streaming, before it is
	// recorded. Anything with side effects must say false.
	ReadOnly(input json.RawMessage) bool
	// Run performs the call. It must return soon after ctx is done. An error
	// becomes an error result the model reads.
	Run(ctx context.Context, call Call) (Result, error)
}

// Func is a Tool made of a function, for tools with a fixed read-only flag.
type Func struct {
	Name        string
	Description string
	// Schema is the JSON schema of the input object; empty means an object
	// with no declared properties.
	Schema     json.RawMessage
	IsReadOnly bool
	Fn         func(ctx context.Context, call Call) (Result, error)
}

// Spec implements Tool.
func (f Func) Spec() llm.ToolSpec {
	s := f.Schema
	if len(s) == 0 {
		s = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return llm.ToolSpec{Name: f.Name, Description: f.Description, InputSchema: s}
}

// ReadOnly implements Tool.
func (f Func) ReadOnly(json.RawMessage) bool { return f.IsReadOnly }

// Run implements Tool.
func (f Func) Run(ctx context.Context, call Call) (Result, error) { return f.Fn(ctx, call) }
