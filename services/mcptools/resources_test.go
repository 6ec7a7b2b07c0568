package mcptools_test

import (
	"strings"
	"testing"

	"jetway/internal/mcptest"
	"jetway/pkg/dispatcherapi"
	"jetway/services/mcptools"
)

// resourcesRoundTrip lists the resources of server through the tools the
// open offered and reads a text one, a picture and a template's.
func resourcesRoundTrip(t *testing.T, o *offered, server string) {
	t.Helper()
	list := call(t, o, "mcp__"+server+"__list_resources", `{}`)
	if list.IsError || !strings.Contains(list.Content, mcptest.NoteURI) || !strings.Contains(list.Content, mcptest.DotURI) ||
		!strings.Contains(list.Content, "template note://echo/{text}") {
		t.Fatalf("list_resources = %+v, want the note, the dot and the template", list)
	}
	if res := call(t, o, "mcp__"+server+"__read_resource", `{"uri":"`+mcptest.NoteURI+`"}`); res.IsError || res.Content != mcptest.NoteText {
		t.Fatalf("read_resource of the note = %+v", res)
	}
	if res := call(t, o, "mcp__"+server+"__read_resource", `{"uri":"`+mcptest.DotURI+`"}`); res.IsError || len(res.Images) != 1 || res.Images[0].MediaType != "image/png" {
		t.Fatalf("read_resource of the picture = %+v, want it as an image", res)
	}
	if res := call(t, o, "mcp__"+server+"__read_resource", `{"uri":"note://echo/templated"}`); res.IsError || res.Content != "echo: templated" {
		t.Fatalf("read_resource through the template = %+v", res)
	}
	if res := call(t, o, "mcp__"+server+"__read_resource", `{"uri":"note://nothing"}`); !res.IsError {
		t.Fatalf("read_resource of no such resource = %+v, want a tool error", res)
	}
	if res := call(t, o, "mcp__"+server+"__read_resource", `{}`); !res.IsError || !strings.Contains(res.Content, "uri is required") {
		t.Fatalf("read_resource without a uri = %+v", res)
	}
}

func TestA_stdio_servers_resources_are_listed_and_read_through_two_tools(t *testing.T) {
	e := newEnv(t)
	_, o := e.open(e.stdio("kit"))
	resourcesRoundTrip(t, o, "kit")
}

func TestAn_http_servers_resources_are_listed_and_read_through_two_tools(t *testing.T) {
	h := mcptest.ServeHTTP(t)
	hub := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}})
	_, o := openSession(t, hub, session, dispatcherapi.AgentMCPServer{Name: "web", URL: h.URL})
	resourcesRoundTrip(t, o, "web")
}

func TestA_server_without_resources_is_offered_no_resource_tools(t *testing.T) {
	srv := mcptest.ServeNoisyHTTP(t)
	hub := mcptools.New(mcptools.Config{AllowHosts: []string{"127.0.0.1"}})
	_, o := openSession(t, hub, session, dispatcherapi.AgentMCPServer{Name: "noisy", URL: srv.URL})
	for _, name := range o.names() {
		if strings.HasSuffix(name, "_resources") || strings.HasSuffix(name, "_resource") {
			t.Fatalf("offered %s for a server that has no resources", name)
		}
	}
}
