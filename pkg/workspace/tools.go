package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// The names under which the runner offers the file tools to a model.
const (
	ToolRead  = "read_file"
	ToolWrite = "write_file"
	ToolEdit  = "edit_file"
	ToolGlob  = "glob"
	ToolGrep  = "grep"
)

// ErrUnknownTool is matched by a Call of a name that is not a file tool.
var ErrUnknownTool = errors.New("unknown file tool")

// ToolSpec describes a file tool to a model: its name, what it does, and the
// JSON schema of its input (the fields of the matching request struct).
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Tools are the specs of the file tools, in the order a model is shown them.
// They are kept here, beside the request structs, so the field names the
// model is told are the ones Call decodes.
func Tools() []ToolSpec {
	return []ToolSpec{
		{ToolRead, "Read lines of a text file in the workspace, numbered like cat -n, with the file's total line count. Use offset and limit for a range of a long file.",
			schema(`"path":{"type":"string","description":"File path, relative to the workspace"},
			"offset":{"type":"integer","minimum":0,"description":"First line to read, counting from 1"},
			"limit":{"type":"integer","minimum":0,"description":"How many lines to read (default 2000)"}`, "path")},
		{ToolWrite, "Create or replace a file in the workspace with the given content, creating parent directories. The write is atomic.",
			schema(`"path":{"type":"string","description":"File path, relative to the workspace"},
			"content":{"type":"string","description":"The whole new content of the file"}`, "path", "content")},
		{ToolEdit, "Replace exact text in a file. old must occur exactly once (include surrounding lines to make it unique) unless all is true.",
			schema(`"path":{"type":"string","description":"File path, relative to the workspace"},
			"old":{"type":"string","description":"The exact text to replace, including whitespace"},
			"new":{"type":"string","description":"The text to put in its place"},
			"all":{"type":"boolean","description":"Replace every occurrence"}`, "path", "old", "new")},
		{ToolGlob, "List files whose paths match a glob pattern; ** matches any number of directories (\"**/*.go\").",
			schema(`"pattern":{"type":"string","description":"Glob pattern, relative to the workspace"},
			"limit":{"type":"integer","minimum":0,"description":"Most paths to return"}`, "pattern")},
		{ToolGrep, "Search file contents with an RE2 regular expression; returns path:line: text for each matching line and the total count.",
			schema(`"pattern":{"type":"string","description":"RE2 regular expression; (?i) for case-insensitive"},
			"path":{"type":"string","description":"A file, a directory or a glob pattern to search (default: the whole workspace)"},
			"limit":{"type":"integer","minimum":0,"description":"Most lines to return (default 100)"}`, "pattern")},
	}
}

func schema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(`{"type":"object","properties":{`+props+`},"required":`+string(req)+`,"additionalProperties":false}`)); err != nil {
		panic("workspace: bad tool schema: " + err.Error())
	}
	return b.Bytes()
}

// Call runs the file tool name with its JSON input and returns its result as
// JSON: the one entry point the jobs service needs to serve the tools over
// NATS. Unknown input fields are refused, so a misnamed field ("old_string")
// is reported instead of silently ignored.
func (w *Workspace) Call(ctx context.Context, name string, input []byte) ([]byte, error) {
	var (
		out any
		err error
	)
	switch name {
	case ToolRead:
		out, err = call(ctx, name, input, w.Read)
	case ToolWrite:
		out, err = call(ctx, name, input, w.Write)
	case ToolEdit:
		out, err = call(ctx, name, input, w.Edit)
	case ToolGlob:
		out, err = call(ctx, name, input, w.Glob)
	case ToolGrep:
		out, err = call(ctx, name, input, w.Grep)
	default:
		return nil, fmt.Errorf("workspace: %q: %w", name, ErrUnknownTool)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

func call[Req, Res any](ctx context.Context, name string, input []byte, fn func(context.Context, Req) (Res, error)) (Res, error) {
	var req Req
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var zero Res
		return zero, fmt.Errorf("workspace: %s: bad input: %w", name, err)
	}
	return fn(ctx, req)
}
