package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// AskTool is the test server's tool that asks the person behind the
// client (elicitation) before it answers.
const AskTool = "ask"

// AskIn is the ask tool's input: the question, and the form's fields
// (text fields; default one, "answer").
type AskIn struct {
	Question string   `json:"question"`
	Fields   []string `json:"fields,omitempty"`
}

// addAsk gives the server the ask tool. It is written as a multi
// round-trip tool (SEP-2322): it returns an input request, and answers
// when the call comes again with the response. For a client of an older
// protocol (every stdio connection through a jobs worker) the SDK turns
// the input request into an elicitation/create request of its own, in
// the middle of the call; a newer client fulfils it and calls again.
func addAsk(s *mcp.Server) {
	schema := json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"},"fields":{"type":"array","items":{"type":"string"}}},"required":["question"]}`)
	s.AddTool(&mcp.Tool{Name: AskTool, Description: "Asks the person a question, then says what they answered.", InputSchema: schema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in AskIn
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			if r, ok := req.Params.InputResponses["q"].(*mcp.ElicitResult); ok {
				return text("%s", Answered(r)), nil
			}
			if len(in.Fields) == 0 {
				in.Fields = []string{"answer"}
			}
			props := map[string]any{}
			for _, f := range in.Fields {
				props[f] = map[string]any{"type": "string", "description": "your " + f}
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{
				Message:         in.Question,
				RequestedSchema: map[string]any{"type": "object", "properties": props},
			}}}, nil
		})
}

// Answered is how the ask tool reports the person's response.
func Answered(r *mcp.ElicitResult) string {
	if r.Action != "accept" {
		return "the person chose " + r.Action
	}
	var parts []string
	for k, v := range r.Content {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(parts)
	return "the person answered " + strings.Join(parts, " ")
}
