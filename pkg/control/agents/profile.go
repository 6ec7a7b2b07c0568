package agents

import (
	"strings"
	"time"
)

// The profile types. They are the wire form too: pkg/dispatcherapi
// aliases them (Agent, AgentModel, …), so the dispatcher's HTTP and NATS
// answers and what the runners read are one type.

// Profile is an agent profile: what a session's agent is for (instructions,
// the system prompt), which model answers it, which tools it may use and
// how far it may go. It is the body of PUT /v1/agents/{name} (Name,
// Version and Updated are the server's and ignored there) and of every
// answer about a profile. Only Instructions is required; every other field
// left out takes the runner's default. A profile names its model's
// endpoint, never a key: keys stay in the runners' environment.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Instructions are the system prompt of the agent's runs.
	Instructions string `json:"instructions"`
	Model        Model  `json:"model,omitzero"`
	Tools        Tools  `json:"tools,omitzero"`
	Limits       Limits `json:"limits,omitzero"`
	// Recovery is the recovery policy of its sessions unless a session
	// overrides it: "automatic", "manual" or "never" ("" keeps the
	// runner's default).
	Recovery string `json:"recovery,omitempty"`
	// ContextWindow is the model's context size in tokens (0: the
	// runner's).
	ContextWindow int `json:"context_window,omitempty"`
	// InstructionFiles are workspace files, relative to its root, sent
	// after the instructions at each run start. Absent (null) means
	// ["AGENTS.md"]; an empty list means none.
	InstructionFiles []string `json:"instruction_files"`
	// MCP lists the MCP tool servers whose tools the agent's runs offer
	// the model, as mcp__<server>__<tool> (tools.allow and tools.deny
	// name them so too). Absent: none.
	MCP []MCPServer `json:"mcp,omitempty"`
	// Network is what the agent's shell commands and stdio MCP servers
	// may reach of the network: "none" (the default, also ""),
	// "outbound" (TCP and UDP out, no listening TCP port) or "all".
	Network string `json:"network,omitempty"`
	// Approvers says who may decide the agent's approvals and answer its
	// questions: "tenant" (any user of the tenant, also "") or "admins".
	Approvers string `json:"approvers,omitempty"`
	// ApprovalTimeout is how long an approval or a question waits, a Go
	// duration ("" is 24h); then the model reads a rejection naming it.
	ApprovalTimeout string `json:"approval_timeout,omitempty"`
	// Version is the profile's version (its revision in the agents
	// bucket); 0 for the implicit default profile.
	Version uint64    `json:"version"`
	Updated time.Time `json:"updated,omitzero"`
}

// Model says which model answers an agent. Provider is "anthropic",
// "openai" (any OpenAI-compatible server) or "script"; "" keeps the
// runner's default model. Endpoint names a runner-side endpoint
// configuration (base URL and the name of the variable holding its key).
type Model struct {
	Provider string `json:"provider,omitempty"`
	Name     string `json:"name,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
}

// Tools says which tools an agent has. Allow lists tool names (or
// "*"); absent (null) means every tool the runner has, an empty list none.
// Deny holds permission rules ("shell(rm *)") that refuse calls of an
// allowed tool.
type Tools struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny,omitempty"`
	// Ask are permission rules (the grammar of Deny) marking calls that
	// wait for a person's decision instead of running (docs/APPROVALS.md).
	Ask []string `json:"ask,omitempty"`
}

// MCPServer is one MCP tool server of an agent profile. A stdio
// server (Command set) runs in the session's jobs worker, confined to the
// session's workspace like its jobs, with an environment of Env and
// Secrets only; an http server (URL set) is reached from the runner over
// the streamable HTTP transport. A profile never holds a secret: Secrets
// and Headers name secrets the operator configures on the workers and
// runners, a plain name only the profile's own tenant's
// (JETWAY_MCP_SECRET_<TENANT>__<NAME>) and shared:<name> the operator's
// secret for every tenant (JETWAY_MCP_SHARED_SECRET_<NAME>); see
// MCPSecretVar.
type MCPServer struct {
	// Name is 1–32 of [A-Za-z0-9_-] without "__": the <server> of its
	// tools' names.
	Name string `json:"name"`
	// Transport is "stdio" or "http"; left out, it is stdio when Command
	// is set and http when URL is.
	Transport string `json:"transport,omitempty"`
	// Command and Args (stdio) start the server in the session's
	// workspace.
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// Env (stdio) are plain variables of the server's environment.
	Env map[string]string `json:"env,omitempty"`
	// Secrets (stdio) maps a variable of the server's environment to the
	// name of a secret the jobs worker holds: words of letters and digits
	// joined by single - or _, or shared:<name>.
	Secrets map[string]string `json:"secrets,omitempty"`
	// URL (http) is the server's streamable HTTP endpoint.
	URL string `json:"url,omitempty"`
	// Headers (http) maps a request header to the name of a secret the
	// runner holds, whose value is the header's whole value.
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout is how long one tool call may take, a Go duration ("30s";
	// default 60s). A call past it is answered with a tool error.
	Timeout string `json:"timeout,omitempty"`
}

// Limits bound an agent's runs; 0 (or "") keeps the runner's.
type Limits struct {
	MaxTurns int `json:"max_turns,omitempty"`
	// MaxDuration is a Go duration: "30m", "2h".
	MaxDuration string `json:"max_duration,omitempty"`
	// Fuel is a session's token budget over all its runs.
	Fuel        int64 `json:"fuel,omitempty"`
	RunsPerHour int   `json:"runs_per_hour,omitempty"`
	// MaxSubagentDepth is how deep sub-agents may nest below a root
	// session (a root's child is depth 1): a session of this profile may
	// start a child only if the child's depth is within it.
	MaxSubagentDepth int `json:"max_subagent_depth,omitempty"`
	// MaxSubagents is how many sub-agents a session of this profile may
	// have at work at once.
	MaxSubagents int `json:"max_subagents,omitempty"`
}

// MCPServerState is one MCP server of a session as the session detail
// shows it.
type MCPServerState struct {
	Server string `json:"server"`
	// Transport is "stdio" or "http".
	Transport string `json:"transport"`
	// State is "running" (connected, its tools offered), "starting",
	// "restarting" (it crashed or its connection ended; the next call
	// starts it again, after a pause), "stopped" (Ground Stop, a kill or
	// its idle timeout ended it; Error says which), "failed" (it could not
	// be started or reached; Error says why), "idle" (no run has used it
	// yet, or the last run that did is over) or "unknown" (the session's
	// jobs worker did not answer; Error says so).
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// ServingKey names what a runner must have configured to serve m: its
// provider, and for a named endpoint "@" and the endpoint as its variables
// spell it (upper case, - as _; docs/PROFILES.md). Runners advertise the
// keys they can serve in their heartbeat and the dispatcher compares a
// profile's key with them, so a send naming a model no runner can call is
// refused at once instead of by a runner, later, on the session's stream.
// The zero Model (the runner's own) is "".
func ServingKey(m Model) string {
	if m == (Model{}) {
		return ""
	}
	if m.Endpoint == "" {
		return m.Provider
	}
	return m.Provider + "@" + strings.ToUpper(strings.ReplaceAll(m.Endpoint, "-", "_"))
}
