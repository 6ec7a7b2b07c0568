package mcptools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	rec "jetway/pkg/control/approvals"
)

// An MCP server may ask the person behind the client for something in the
// middle of a tool call (elicitation/create, or an input request of the
// call's result). jetway takes it the road of ask_person: a durable
// question approval of the session (Ref.Ask), listed and decided like any
// other, whose answer goes back to the server as the elicitation's result
// — accept with the answer, decline on a rejection, cancel on a timeout or
// when the run ends first.
//
// A person answers an approval with one line (the API's "answer", `jetway
// answer`, the chat, the console), so a form is taken only when that line
// can fill it: no field (any answer accepts) or one field of a simple type
// (text, a number, a yes/no, one of an enum). A form of several fields, or
// a URL to open, is refused with an error that says so: a multi-field
// answer parsed after the decision is recorded could fail where nobody can
// correct it, and no surface shows a URL to open.

// formField is the one field of a form jetway can ask for (the zero value:
// none).
type formField struct {
	Name        string
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Enum        []any    `json:"enum"`
	choices     []string // the answers that fill it, when there are few
}

// fieldOf reads a form's schema: its one field, or why it cannot be asked.
func fieldOf(schema any) (formField, error) {
	if schema == nil {
		return formField{}, nil
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return formField{}, fmt.Errorf("the form's schema: %w", err)
	}
	var s struct {
		Properties map[string]formField `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return formField{}, fmt.Errorf("the form's schema: %w", err)
	}
	if len(s.Properties) > 1 {
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		sort.Strings(names)
		return formField{}, fmt.Errorf("a person answers in one line; this form has %d fields (%s): ask for one at a time", len(names), strings.Join(names, ", "))
	}
	for name, f := range s.Properties {
		f.Name = name
		return f, f.setChoices()
	}
	return formField{}, nil
}

// setChoices fixes the answers a field takes, when it takes few.
func (f *formField) setChoices() error {
	switch {
	case len(f.Enum) > 0:
		for _, v := range f.Enum {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("field %s: an enum of %T values; jetway asks for text only", f.Name, v)
			}
			f.choices = append(f.choices, s)
		}
	case f.Type == "boolean":
		f.choices = []string{"yes", "no"}
	case f.Type == "", f.Type == "string", f.Type == "number", f.Type == "integer":
	default:
		return fmt.Errorf("field %s is of type %s; jetway asks for text, a number or a yes/no", f.Name, f.Type)
	}
	return nil
}

// question is what the person reads: who asks, what, and what fills the
// field.
func (f formField) question(server, message string) rec.Question {
	q := fmt.Sprintf("MCP server %s asks: %s", server, message)
	if f.Name == "" {
		return rec.Question{Text: q + "\n(any answer accepts; reject to decline)"}
	}
	label := f.Title
	if label == "" {
		label = f.Name
	}
	q += fmt.Sprintf("\n(answer with %s", label)
	if f.Description != "" {
		q += ": " + f.Description
	}
	switch f.Type {
	case "integer":
		q += ", an integer"
	case "number":
		q += ", a number"
	}
	return rec.Question{Text: q + "; reject to decline)", Choices: f.choices}
}

// content is the answer as the form's content.
func (f formField) content(answer string) (map[string]any, error) {
	if f.Name == "" {
		return nil, nil
	}
	answer = strings.TrimSpace(answer)
	var v any = answer
	switch f.Type {
	case "boolean":
		v = slices.Contains([]string{"yes", "true", "y"}, strings.ToLower(answer))
	case "integer":
		n, err := strconv.ParseInt(answer, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the person's answer %q is not an integer", answer)
		}
		v = n
	case "number":
		n, err := strconv.ParseFloat(answer, 64)
		if err != nil {
			return nil, fmt.Errorf("the person's answer %q is not a number", answer)
		}
		v = n
	}
	return map[string]any{f.Name: v}, nil
}

// elicit is the client's elicitation handler: the server's question put
// to a person, and the decision as its result.
func (s *server) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	p := req.Params
	if p.Mode == "url" || p.URL != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "jetway asks a person questions, not to open URLs: URL elicitation is not supported"}
	}
	f, err := fieldOf(p.RequestedSchema)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	// The run's end ends the question: the server's request may outlive
	// the run on a stdio server that other runs attach to.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.set.ctx, cancel)()
	defer s.asking()()
	reply, err := s.ref.Ask(ctx, f.question(s.spec.Name, p.Message))
	if err != nil {
		s.log.Info().Err(err).Msg("mcp: a question of the server ended unanswered")
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}
	switch reply.State {
	case rec.Answered:
		content, err := f.content(reply.Answer)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		return &mcp.ElicitResult{Action: "accept", Content: content}, nil
	case rec.Rejected:
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	return &mcp.ElicitResult{Action: "cancel"}, nil
}

// asking notes that the server waits for a person, until the returned
// func is called: its calls' timeouts do not run out meanwhile.
func (s *server) asking() func() {
	s.asks.Add(1)
	return func() { s.asks.Add(-1) }
}

// deadline bounds a call by the server's timeout, which does not run out
// while the server waits for a person: the person's hours are not the
// server's. A timeout that falls during a question is taken again, whole,
// from then.
func (s *server) deadline(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	var mu sync.Mutex
	mu.Lock()
	defer mu.Unlock()
	var t *time.Timer
	t = time.AfterFunc(timeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if s.asks.Load() > 0 {
			t.Reset(timeout)
			return
		}
		cancel(errCallTimeout)
	})
	return ctx, func() {
		mu.Lock()
		t.Stop()
		mu.Unlock()
		cancel(context.Canceled)
	}
}
