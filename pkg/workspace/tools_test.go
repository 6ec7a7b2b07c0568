package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCall_runs_each_tool_from_json(t *testing.T) {
	w := openTemp(t, Config{})
	ctx := context.Background()
	steps := []struct{ tool, input, want string }{
		{ToolWrite, `{"path":"src/a.go","content":"package a\nvar x = 1\n"}`, `{"path":"src/a.go","bytes":20,"created":true}`},
		{ToolEdit, `{"path":"src/a.go","old":"x = 1","new":"x = 2"}`, `{"path":"src/a.go","replacements":1}`},
		{ToolRead, `{"path":"src/a.go","offset":2}`, `{"path":"src/a.go","content":"     2\tvar x = 2\n","start_line":2,"end_line":2,"total_lines":2}`},
		{ToolGlob, `{"pattern":"**/*.go"}`, `{"paths":["src/a.go"],"total":1}`},
		{ToolGrep, `{"pattern":"x = \\d"}`, `{"matches":["src/a.go:2: var x = 2"],"total":1}`},
	}
	for _, s := range steps {
		got, err := w.Call(ctx, s.tool, []byte(s.input))
		if err != nil {
			t.Fatalf("%s %s: %v", s.tool, s.input, err)
		}
		if string(got) != s.want {
			t.Fatalf("%s %s\n got %s\nwant %s", s.tool, s.input, got, s.want)
		}
	}
}

func TestCall_refuses_unknown_tools_and_fields(t *testing.T) {
	w := openTemp(t, Config{})
	ctx := context.Background()
	if _, err := w.Call(ctx, "rm_rf", []byte(`{}`)); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown tool: error = %v", err)
	}
	_, err := w.Call(ctx, ToolEdit, []byte(`{"path":"a","old_string":"x","new_string":"y"}`))
	if err == nil || !strings.Contains(err.Error(), `unknown field "old_string"`) {
		t.Errorf("misnamed field: error = %v", err)
	}
	if _, err := w.Call(ctx, ToolRead, []byte(`{"path":"../x"}`)); !errors.Is(err, ErrOutsideWorkspace) {
		t.Errorf("escape through Call: error = %v", err)
	}
}

func TestTools_schemas_name_the_request_fields(t *testing.T) {
	fields := map[string][]string{
		ToolRead:  {"limit", "offset", "path"},
		ToolWrite: {"content", "path"},
		ToolEdit:  {"all", "new", "old", "path"},
		ToolGlob:  {"limit", "pattern"},
		ToolGrep:  {"limit", "path", "pattern"},
	}
	requests := map[string]any{ToolRead: &ReadRequest{}, ToolWrite: &WriteRequest{}, ToolEdit: &EditRequest{}, ToolGlob: &GlobRequest{}, ToolGrep: &GrepRequest{}}
	specs := Tools()
	if len(specs) != len(fields) {
		t.Fatalf("%d tools, want %d", len(specs), len(fields))
	}
	for _, spec := range specs {
		var sch struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(spec.InputSchema, &sch); err != nil {
			t.Fatalf("%s: schema is not JSON: %v", spec.Name, err)
		}
		var props []string
		for k := range sch.Properties {
			props = append(props, k)
		}
		slices.Sort(props)
		if !slices.Equal(props, fields[spec.Name]) {
			t.Errorf("%s: schema fields %v, want %v", spec.Name, props, fields[spec.Name])
		}
		// Every schema field is a field of the request struct.
		for _, p := range props {
			dec := json.NewDecoder(strings.NewReader(`{"` + p + `":null}`))
			dec.DisallowUnknownFields()
			if err := dec.Decode(requests[spec.Name]); err != nil {
				t.Errorf("%s: schema field %q: %v", spec.Name, p, err)
			}
		}
	}
}
