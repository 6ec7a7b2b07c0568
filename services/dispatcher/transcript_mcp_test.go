package dispatcher

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The history shows why a run lacked a server's tools: the MCP servers a
// run's end recorded, redacted like every text of the history.
func TestA_run_ended_entry_carries_the_MCP_servers_that_were_not_running_redacted(t *testing.T) {
	rec := `{"kind":"run_ended","run":"r-1","reason":"completed","mcp":[` +
		`{"server":"intranet","transport":"http","state":"failed","error":"refused: 10.0.0.1 is a private address; an operator may allow the host with --mcp-allow-host 10.0.0.1"},` +
		`{"server":"kit","transport":"stdio","state":"restarting","error":"crashed; its last words: token ghp_abcdefghijklmnopqrstuvwxyz0123456789"}]}`
	e := entryOf(&jetstream.RawStreamMsg{Sequence: 7, Data: []byte(rec)})
	if len(e.MCP) != 2 || e.MCP[0].Server != "intranet" || e.MCP[0].State != "failed" || !strings.Contains(e.MCP[0].Error, "--mcp-allow-host") {
		t.Fatalf("entry MCP = %+v", e.MCP)
	}
	if strings.Contains(e.MCP[1].Error, "ghp_abcdefghijklmnopqrstuvwxyz0123456789") {
		t.Fatalf("a server's last words reach the history unredacted: %s", e.MCP[1].Error)
	}
}
