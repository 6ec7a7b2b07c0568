package mcptools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	"jetway/pkg/llm"
)

// A server's resources (files, records, documents it serves by URI) are
// offered to the model as two tools of the server, beside its own:
// mcp__<server>__list_resources and mcp__<server>__read_resource. They are
// tools like the others — named by tools.allow and tools.deny, recorded,
// redacted — so no rule of the profile needs a new kind of name. A server
// that has a tool of the same name keeps its own.

// Names of the resource tools, after mcp__<server>__.
const (
	ListResourcesTool = "list_resources"
	ReadResourceTool  = "read_resource"
)

// resourcesPage is how many resources one list_resources answer holds at
// most: a server with thousands must not fill the model's context.
const resourcesPage = 100

// resourceTools are the resource tools of the server behind cs, when it
// says it has resources and lists no tool of those names itself.
func (s *server) resourceTools(cs *mcp.ClientSession, tools []tool.Tool) []tool.Tool {
	init := cs.InitializeResult()
	if init == nil || init.Capabilities == nil || init.Capabilities.Resources == nil {
		return nil
	}
	taken := map[string]bool{}
	for _, t := range tools {
		taken[t.Spec().Name] = true
	}
	var out []tool.Tool
	for _, rt := range []*resourceTool{
		{srv: s, read: false, spec: llm.ToolSpec{
			Name: agents.MCPToolName(s.spec.Name, ListResourcesTool),
			Description: fmt.Sprintf("Lists the resources MCP server %s serves (documents, files, records by URI), "+
				"at most %d at a time, and the URI templates it reads; pass the answer's cursor for more.", s.spec.Name, resourcesPage),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"cursor":{"type":"string","description":"the cursor a previous answer gave, for the next page"}}}`),
		}},
		{srv: s, read: true, spec: llm.ToolSpec{
			Name:        agents.MCPToolName(s.spec.Name, ReadResourceTool),
			Description: fmt.Sprintf("Reads a resource of MCP server %s by its URI (one list_resources gave, or one of its URI templates filled in).", s.spec.Name),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"uri":{"type":"string","description":"the resource's URI"}},"required":["uri"]}`),
		}},
	} {
		if taken[rt.spec.Name] {
			s.log.Warn().Str("tool", rt.spec.Name).Msg("mcp: the server has a tool of the resource tool's name; its own is offered")
			continue
		}
		out = append(out, rt)
	}
	return out
}

// resourceTool lists or reads a server's resources.
type resourceTool struct {
	srv  *server
	read bool
	spec llm.ToolSpec
}

func (t *resourceTool) Spec() llm.ToolSpec { return t.spec }

// ReadOnly is false, as for the server's tools: reading a resource is the
// server's code running, whatever it claims.
func (t *resourceTool) ReadOnly(json.RawMessage) bool { return false }

// Run lists or reads; every failure is an error result the model reads.
func (t *resourceTool) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Cursor string `json:"cursor"`
		URI    string `json:"uri"`
	}
	if len(call.Input) > 0 && string(call.Input) != "null" {
		if err := json.Unmarshal(call.Input, &in); err != nil {
			return errorResult("bad input: %v", err), nil
		}
	}
	if t.read && strings.TrimSpace(in.URI) == "" {
		return errorResult("uri is required"), nil
	}
	return t.srv.call(ctx, t.spec.Name, func(ctx context.Context, cs *mcp.ClientSession) (tool.Result, error) {
		if t.read {
			return readResource(ctx, cs, in.URI)
		}
		return listResources(ctx, cs, in.Cursor)
	})
}

// listResources is one page of the server's resources and, on the first
// page, its URI templates, one a line.
func listResources(ctx context.Context, cs *mcp.ClientSession, cursor string) (tool.Result, error) {
	page, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
	if err != nil {
		return tool.Result{}, fmt.Errorf("resources/list: %w", err)
	}
	var b strings.Builder
	for i, r := range page.Resources {
		if i == resourcesPage {
			break
		}
		fmt.Fprintf(&b, "%s  %s", r.URI, r.Name)
		if r.MIMEType != "" {
			fmt.Fprintf(&b, " (%s)", r.MIMEType)
		}
		if r.Description != "" {
			fmt.Fprintf(&b, ": %s", oneLine(r.Description))
		}
		b.WriteByte('\n')
	}
	if cursor == "" {
		// A server without templates may not know the method: that is no
		// failure of the listing.
		if tpl, err := cs.ListResourceTemplates(ctx, nil); err == nil {
			for _, rt := range tpl.ResourceTemplates {
				fmt.Fprintf(&b, "template %s  %s", rt.URITemplate, rt.Name)
				if rt.Description != "" {
					fmt.Fprintf(&b, ": %s", oneLine(rt.Description))
				}
				b.WriteByte('\n')
			}
		} else if ctx.Err() != nil {
			return tool.Result{}, err
		}
	}
	if page.NextCursor != "" {
		fmt.Fprintf(&b, "more: pass cursor %q for the next page\n", page.NextCursor)
	}
	if b.Len() == 0 {
		return tool.Result{Content: "(the server lists no resources)"}, nil
	}
	return tool.Result{Content: strings.TrimRight(b.String(), "\n")}, nil
}

// readResource is a resource's contents as a tool result: text as text,
// pictures as images, other binary content by what it is.
func readResource(ctx context.Context, cs *mcp.ClientSession, uri string) (tool.Result, error) {
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return tool.Result{}, fmt.Errorf("resources/read %s: %w", uri, err)
	}
	if res == nil || len(res.Contents) == 0 {
		return tool.Result{}, errors.New("resources/read " + uri + ": the server returned no contents")
	}
	var out tool.Result
	var text []string
	for _, c := range res.Contents {
		switch {
		case c == nil:
		case c.Blob != nil && strings.HasPrefix(c.MIMEType, "image/"):
			out.Images = append(out.Images, llm.Image{MediaType: c.MIMEType, Data: base64.StdEncoding.EncodeToString(c.Blob)})
			text = append(text, fmt.Sprintf("[resource %s, %s]", c.URI, c.MIMEType))
		case c.Blob != nil:
			text = append(text, fmt.Sprintf("[resource %s, %s, %d bytes, not shown]", c.URI, c.MIMEType, len(c.Blob)))
		case len(res.Contents) == 1:
			text = append(text, c.Text)
		default:
			text = append(text, fmt.Sprintf("[resource %s]\n%s", c.URI, c.Text))
		}
	}
	out.Content = strings.Join(text, "\n")
	if out.Content == "" && len(out.Images) == 0 {
		out.Content = "(the resource is empty)"
	}
	return out, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
