package jobsapi

import (
	"encoding/json"
	"errors"
	"regexp"
)

// MCP stdio servers run in the session's jobs worker; the runner speaks
// MCP (JSON-RPC 2.0) with them over NATS request/reply, which fits the
// services' allow_responses permissions: nothing but the worker's own
// subjects and the caller's inbox is used.
//
//   - mcp_open attaches a connection to the session's server of that name,
//     starting the server first if it is not running (a crashed one only
//     after its backoff). A server has one connection at a time: a new
//     open (the session's next run, or a runner that took the session
//     over) ends the previous one. The answer names the connection. An
//     npx server's package is installed for the tenant first (once); an
//     open that waited 10 s for the install answers CodeNotYet,
//     and the caller asks again.
//   - mcp_send writes JSON-RPC messages to the server's stdin, one line
//     each. The worker answers an "initialize" of a later connection
//     itself, with the result the server gave the first one, because an
//     MCP server is initialized once per process.
//   - mcp_recv is a long poll: it answers with the messages the server
//     wrote since the last one (its stdout lines), or with none after
//     WaitMS, or with Closed and the reason once the connection ended
//     (the server exited, was stopped, or another connection took over).
//   - mcp_close detaches; the server keeps running until its idle
//     timeout, the session's Ground Stop or kill_session, or the worker's
//     end.
//   - mcp_state lists the session's servers and their states: its stdio
//     servers as the worker sees them, and the http servers as the
//     session's runner last reported them with mcp_report.

// MCPServer is a stdio MCP server as a profile describes it.
type MCPServer struct {
	Name    string            `json:"name"`
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Secrets maps a variable of the server's environment to the name of
	// a secret the worker holds for the tenant, or shared:<name>
	// (agents.MCPSecretVar).
	Secrets map[string]string `json:"secrets,omitempty"`
	// Network is what the server may reach of the network, from the
	// session's agent profile: "none" (also ""), "outbound" or "all".
	Network string `json:"network,omitempty"`
}

var mcpServerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// MCPOpenRequest attaches a connection to a session's stdio server.
type MCPOpenRequest struct {
	SessionRequest
	Server MCPServer `json:"server"`
	// Run names the run the connection serves (for logs).
	Run string `json:"run,omitempty"`
}

// Validate checks the session and the server's name and command.
func (r MCPOpenRequest) Validate() error {
	if err := r.SessionRequest.Validate(); err != nil {
		return err
	}
	if !mcpServerName.MatchString(r.Server.Name) {
		return errors.New("server name: 1–32 of A-Z a-z 0-9 _ -")
	}
	if r.Server.Command == "" {
		return errors.New("server command is empty")
	}
	return nil
}

// MCPOpenResponse names the connection.
type MCPOpenResponse struct {
	Conn string `json:"conn"`
	// Restarts counts how often the server was started again after a
	// crash.
	Restarts int `json:"restarts"`
}

// MCPConnRequest names a connection of a session's server.
type MCPConnRequest struct {
	SessionRequest
	Server string `json:"server"`
	Conn   string `json:"conn"`
}

// Validate checks the session and that a connection is named.
func (r MCPConnRequest) Validate() error {
	if err := r.SessionRequest.Validate(); err != nil {
		return err
	}
	if !mcpServerName.MatchString(r.Server) || r.Conn == "" {
		return errors.New("server and conn are required")
	}
	return nil
}

// MCPSendRequest writes JSON-RPC messages to the server.
type MCPSendRequest struct {
	MCPConnRequest
	Messages []json.RawMessage `json:"messages"`
}

// MCPRecvRequest waits up to WaitMS for the server's messages.
type MCPRecvRequest struct {
	MCPConnRequest
	WaitMS int64 `json:"wait_ms,omitempty"`
}

// MCPRecvResponse holds the server's messages in the order it wrote
// them. Closed says the connection ended (after these messages), and
// Reason why.
type MCPRecvResponse struct {
	Messages []json.RawMessage `json:"messages,omitempty"`
	Closed   bool              `json:"closed,omitempty"`
	Reason   string            `json:"reason,omitempty"`
}

// MCPReportRequest is a runner's report of the states of a session's
// http servers, which the worker keeps for mcp_state.
type MCPReportRequest struct {
	SessionRequest
	Servers []MCPServerState `json:"servers"`
}

// MCPEmpty answers send and close.
type MCPEmpty struct{}

// MCPStateResponse lists a session's stdio servers on its worker.
type MCPStateResponse struct {
	Servers []MCPServerState `json:"servers"`
}

// MCPServerState is one stdio server: "starting", "running",
// "restarting" (crashed; Error says how, and it starts again at the next
// open after its backoff) or "stopped" (Error says why).
type MCPServerState struct {
	Server string `json:"server"`
	// Transport is "stdio", or "http" for a state a runner reported.
	Transport string `json:"transport"`
	State     string `json:"state"`
	Error     string `json:"error,omitempty"`
	Pid       int    `json:"pid,omitempty"`
	Restarts  int    `json:"restarts"`
}

// MCPMaxRecvWait caps a receive's long poll; the client asks again.
const MCPMaxRecvWaitMS = 25_000
