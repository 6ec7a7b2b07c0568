// Package dispatcherapi is the wire contract of the dispatcher: the NATS
// micro service name and request subjects, and the JSON body of every
// request and answer its HTTP and NATS APIs speak. The dispatcher (package
// services/dispatcher) serves it and the Go client (package pkg/client)
// speaks it, so the two cannot drift apart.
//
// It lives under pkg, not beside the dispatcher as jobsapi lives beside the
// jobs service, because pkg/client imports it and nothing under pkg imports
// a service. It therefore imports no service either: where an answer carries
// what another service stores (a job record, a layover), it has its own wire
// type or keeps the stored JSON as it is.
//
// The field names are the public contract (docs/EVENTS.md, openapi.yaml):
// they are only ever added to.
package dispatcherapi

import (
	"encoding/json"
	"strings"
	"time"

	"jetway/pkg/control/agents"
	"jetway/pkg/control/approvals"
)

const (
	// ServiceName is the NATS micro service name (see `nats micro ls`).
	ServiceName = "jetway-dispatcher"
	// SubjectPrefix starts every NATS API subject: jetway.api.input, …
	SubjectPrefix = "jetway.api"
)

// NATS API subjects. A request carries the token in an Authorization header
// ("Bearer <token>") and JSON in the body; the reply is the same JSON the
// HTTP API answers, or a micro error whose code is the HTTP status and whose
// data is the problem+json body.
const (
	SubjectInput    = SubjectPrefix + ".input"    // {"session","text","id"?,"agent"?} → Accepted
	SubjectSteer    = SubjectPrefix + ".steer"    // {"session","note","id"?} → Accepted
	SubjectEvent    = SubjectPrefix + ".event"    // a CloudEvent, binary or structured → Accepted
	SubjectSessions = SubjectPrefix + ".sessions" // {} → SessionList; {"session"} → SessionDetail
	SubjectJobs     = SubjectPrefix + ".jobs"     // {"session"} → JobList
	SubjectStop     = SubjectPrefix + ".stop"     // {"action":"on"|"off"|"get","scope"?,"tenant"?,"session"?,"reason"?} → StopState
	// SubjectRecovery reads or changes a session's recovery override:
	// {"session","action":"get"|"set"|"clear","policy"?,"max_attempts"?} → RecoveryState.
	SubjectRecovery = SubjectPrefix + ".recovery"
	// SubjectTranscript pages a session's transcript:
	// {"session","after"?,"limit"?} → TranscriptPage.
	SubjectTranscript = SubjectPrefix + ".transcript"
	// SubjectJob reads a job's output or kills it:
	// {"session","job","action":"output"|"kill","offset"?,"limit"?,"tail"?,"grep"?} → JobOutput | JobKilled.
	SubjectJob = SubjectPrefix + ".job"
	// SubjectAgents lists, reads, stores and deletes agent profiles:
	// {"action":"list"|"get"|"put"|"delete","name"?,"profile"?} → AgentList |
	// Agent | AgentDeleted. Without an action: get when a name is given,
	// else list. Storing and deleting need an admin token.
	SubjectAgents = SubjectPrefix + ".agents"
)

// Endpoints names every NATS API endpoint (the last token of its subject).
// The dispatcher serves exactly these, and the attack suites try each one
// from a tenant account: an endpoint added to the dispatcher and not here
// does not start.
var Endpoints = []string{"input", "steer", "event", "sessions", "jobs", "stop", "recovery", "transcript", "job", "agents", "cluster", "approvals"}

// TenantSubject is the subject an API request of a tenant account arrives
// on in the JETWAY account: the tenant calls jetway.api.<name> in its own
// account, and its import maps that to jetway.api.<tenant>.<name>.
func TenantSubject(tenant, name string) string { return SubjectPrefix + "." + tenant + "." + name }

// Problem documents: every error body is an RFC 9457 problem of this media
// type whose type URI starts with ProblemTypePrefix.
const (
	ContentTypeProblem = "application/problem+json"
	ProblemTypePrefix  = "urn:jetway:problem:"
)

// Problem is an RFC 9457 problem detail: the body of an HTTP error and the
// data of a NATS error reply alike.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail says what exactly was wrong with this request.
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// RetryAfter (seconds) mirrors the Retry-After header for NATS callers,
	// which have no such header.
	RetryAfter int `json:"retry_after,omitempty"`
	// Field names the request field that was wrong, when one was
	// ("limits.max_turns", "agent").
	Field string `json:"field,omitempty"`
	// Approval is the earlier decision when a second one is refused (409
	// already-decided).
	Approval *Approval `json:"approval,omitempty"`
}

// Error makes a problem an error, so the dispatcher can return one from
// any depth and answer it as it is on either transport.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return p.Title
	}
	return p.Title + ": " + p.Detail
}

// Slug is the short name of the problem, the end of its type URI
// (invalid-token for urn:jetway:problem:invalid-token): what a caller
// switches on, and the dispatcher's metrics label.
func (p *Problem) Slug() string { return strings.TrimPrefix(p.Type, ProblemTypePrefix) }

// Accepted is the answer to a publish: the CE id, and whether the stream
// already had an event with that id (a retry), in which case nothing new
// was stored.
type Accepted struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
	// Held lists the Ground Stop switches that cover the session right now
	// (input, steer, resume and CloudEvent answers): the event is stored, and waits
	// until every one of them is lifted. Absent when none is on.
	Held []StopSwitch `json:"held,omitempty"`
}

// BatchAccepted answers a batch of CloudEvents, in the order sent.
type BatchAccepted struct {
	Events []Accepted `json:"events"`
}

// InputRequest is the body of POST /v1/sessions/{session}/input.
type InputRequest struct {
	Text string `json:"text"`
	// ID optionally fixes the CE id, so a client retrying after a lost
	// response is stored once.
	ID string `json:"id,omitempty"`
	// Agent binds the session to the tenant's agent profile of that name
	// from its next run on (the jetwayagent extension); "" keeps the
	// session's binding.
	Agent string `json:"agent,omitempty"`
}

// SteerRequest is the body of POST /v1/sessions/{session}/steer.
type SteerRequest struct {
	Note string `json:"note"`
	ID   string `json:"id,omitempty"`
	// Agent binds the session to the tenant's agent profile of that name,
	// as InputRequest.Agent does: the steer itself goes to the run under
	// way, the profile applies from the next run's start on.
	Agent string `json:"agent,omitempty"`
}

// ResumeRequest is the optional body of POST /v1/sessions/{session}/resume.
type ResumeRequest struct {
	Note string `json:"note,omitempty"`
	ID   string `json:"id,omitempty"`
}

// SessionInfo is one session record as stored by the runner. Record is the
// stored JSON as it is (a non-JSON value comes as a JSON string), so this
// API does not break when the record grows.
type SessionInfo struct {
	Session  string          `json:"session"`
	Revision uint64          `json:"revision"`
	Updated  time.Time       `json:"updated"`
	Record   json.RawMessage `json:"record"`
}

// SessionList is the answer of GET /v1/sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

// JobInfo is one background job record as stored by the jobs service.
type JobInfo struct {
	Job      string          `json:"job"`
	Revision uint64          `json:"revision"`
	Updated  time.Time       `json:"updated"`
	Record   json.RawMessage `json:"record"`
}

// JobList is the answer of GET /v1/sessions/{session}/jobs.
type JobList struct {
	Jobs []JobInfo `json:"jobs"`
}

// StopState is the state of one Ground Stop switch.
type StopState struct {
	GroundStop bool `json:"ground_stop"`
	// Scope is "global", "<tenant>/*" (every session of a tenant) or
	// "<tenant>/<session>".
	Scope  string    `json:"scope"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// GlobalStop, in an answer about a tenant or a session, says whether the
	// global switch is on as well. Who set it and why are an operator's to
	// read: they may name another tenant or an incident.
	GlobalStop *bool `json:"global_stop,omitempty"`
	// TenantStop, in an answer about a session, says whether its tenant's
	// switch is on as well: the session does not run either way.
	TenantStop *bool `json:"tenant_stop,omitempty"`
	// Sessions lists the tenant's session switches that are on (in a read
	// of a tenant's switch only).
	Sessions []StopState `json:"sessions,omitempty"`
	// Covering, in a read about a session, lists every switch that is on
	// and covers it: global, its tenant's, its own.
	Covering []StopSwitch `json:"covering,omitempty"`
}

// StopSwitch is one Ground Stop switch that is on, as an answer about a
// session names it.
type StopSwitch struct {
	// Scope is "global", "tenant", "session" or "ancestor": a sub-agent is
	// held by its ancestors' switches too (its root's holds the tree).
	Scope string `json:"scope"`
	// Session is the ancestor whose switch it is, for scope "ancestor".
	Session string `json:"session,omitempty"`
	// Since is when it was turned on.
	Since time.Time `json:"since,omitzero"`
	// By and Reason are what the switch stores: the tenant (or "operator")
	// whose token set it, and why. Of the global switch only an operator
	// learns them.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// StopRequest is the optional body of POST /v1/stop.
type StopRequest struct {
	Reason string `json:"reason,omitempty"`
}

// RecoveryRequest is the body of PUT /v1/sessions/{session}/recovery. It is
// the whole override: a field absent or null clears that part, so the same
// PUT twice leaves the same record.
type RecoveryRequest struct {
	// Policy is "automatic", "manual" or "never".
	Policy *string `json:"policy"`
	// MaxAttempts is how many restarts are allowed; 0 means none on its own.
	MaxAttempts *int `json:"max_attempts"`
}

// RecoveryOverride is what a session record sets of its recovery rule; a
// nil field keeps the default.
type RecoveryOverride struct {
	// Policy is "automatic", "manual" or "never".
	Policy      *string `json:"policy,omitempty"`
	MaxAttempts *int    `json:"max_attempts,omitempty"`
}

// RecoverySettings is the recovery rule in effect: the defaults with the
// session's override applied.
type RecoverySettings struct {
	Policy      string `json:"policy"`
	MaxAttempts int    `json:"max_attempts"`
}

// RecoveryState answers every recovery route.
type RecoveryState struct {
	Session string `json:"session"`
	// Override is what the session record sets; null when it sets nothing.
	Override *RecoveryOverride `json:"override"`
	// Effective is the defaults with Override applied: what a runner decides
	// the next recovery of this session by.
	Effective RecoverySettings `json:"effective"`
	// Revision is the session record's revision after the call; 0 when the
	// session has no record.
	Revision uint64 `json:"revision"`
}

// Layover is work a session's agent set down, waiting for something, with
// the io.jetway.resume it fires at At.
type Layover struct {
	Tenant     string    `json:"tenant"`
	Session    string    `json:"session"`
	ID         string    `json:"id"`
	Event      string    `json:"event"`
	WaitingFor string    `json:"waiting_for"`
	BookedBy   string    `json:"booked_by"`
	BookedAt   time.Time `json:"booked_at"`
	At         time.Time `json:"at"`
	Checks     uint32    `json:"checks"`
}

// LayoverList answers GET /v1/sessions/{session}/layovers.
type LayoverList struct {
	Layovers []Layover `json:"layovers"`
}

// LayoverCancelled answers DELETE /v1/sessions/{session}/layover.
type LayoverCancelled struct {
	Cancelled bool `json:"cancelled"`
}

// NATSRequest is the body of the NATS API requests that name a session.
type NATSRequest struct {
	Session string `json:"session,omitempty"`
	Text    string `json:"text,omitempty"`
	// Agent (input, steer) is InputRequest's.
	Agent string `json:"agent,omitempty"`
	Note  string `json:"note,omitempty"`
	ID    string `json:"id,omitempty"`
	// Action: stop "on", "off" or "get" (default); recovery "set", "clear"
	// or "get" (default); job "output" (default) or "kill".
	Action string `json:"action,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Scope and Tenant (stop only) name the switch: "global" needs an
	// operator token, as does naming another tenant.
	Scope  string `json:"scope,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// Policy and MaxAttempts (recovery "set" only) are RecoveryRequest's.
	Policy      *string `json:"policy,omitempty"`
	MaxAttempts *int    `json:"max_attempts,omitempty"`
	// After and Limit (transcript) page the transcript.
	After uint64 `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
	// Job names a job (job); Offset, Tail and Grep are JobOutputRequest's
	// (Limit too).
	Job    string `json:"job,omitempty"`
	Offset int    `json:"offset,omitempty"`
	Tail   int    `json:"tail,omitempty"`
	Grep   string `json:"grep,omitempty"`
	// Name (agents) names a profile; Profile (agents "put") is its body.
	Name    string `json:"name,omitempty"`
	Profile *Agent `json:"profile,omitempty"`
	// Approval names an approval (approvals "decide"); Decision, Answer
	// and Input are DecisionRequest's (Reason too). Without Session,
	// approvals "list" lists the tenant's.
	Approval string          `json:"approval,omitempty"`
	Decision string          `json:"decision,omitempty"`
	Answer   string          `json:"answer,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
}

// SessionDetail answers GET /v1/sessions/{session}: the session record as
// stored (SessionInfo's fields, unchanged) and what a person needs to know
// why the session does or does not run.
type SessionDetail struct {
	SessionInfo
	// State is "idle", "running", "interrupted" (recovery refused; it waits
	// for a person) or "stopped" (Ground Stop ended its run).
	State string `json:"state"`
	// Run is the live run's id while State is running.
	Run string `json:"run,omitempty"`
	// Cause is the live or last run's cause; Reason why the last run ended
	// or why the session is interrupted.
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Since is when the session entered State.
	Since time.Time `json:"since,omitzero"`
	// Runs counts the session's runs.
	Runs int `json:"runs"`
	// Agent names the agent profile the session runs with.
	Agent string `json:"agent"`
	// GroundStop lists every Ground Stop switch that is on and covers the
	// session; empty when none holds it.
	GroundStop []StopSwitch `json:"ground_stop"`
	// PendingEvents counts the events stored for the session that have not
	// reached the model yet: queued for its next run, or notices waiting for
	// the running one's next model call (Ground Stop holds them all).
	PendingEvents int `json:"pending_events"`
	// Jobs are the session's running background jobs as its jobs worker
	// reports them; JobsError says why they could not be read (the worker
	// does not answer), in which case Jobs is empty.
	Jobs      []JobSummary `json:"jobs"`
	JobsError string       `json:"jobs_error,omitempty"`
	// Layovers are the work the agent set down to check later.
	Layovers []Layover `json:"layovers"`
	// Waiting are the approvals and questions the session waits for a
	// person to decide (then State is "waiting"; empty: none).
	Waiting []Approval `json:"waiting"`
	// Recovery is the session's recovery override and the rule in effect.
	Recovery RecoveryState `json:"recovery"`
	// Children are the sub-agent sessions the session's runs started, in
	// start order, each as its own record says it is doing (empty: none).
	Children []ChildSummary `json:"children"`
	// Parent and Root name, for a sub-agent's session, the session that
	// started it and the first session of its lineage.
	Parent string `json:"parent,omitempty"`
	Root   string `json:"root,omitempty"`
	// MCP is the state of each MCP server of the session's agent profile
	// (absent when it names none).
	MCP []MCPServerState `json:"mcp,omitempty"`
}

// ChildSummary is one sub-agent session of a session: its name, agent
// profile and number, its state as its own record says ("idle",
// "running", "interrupted", "stopped"), its live run, since when it is in
// that state, and why its last run ended.
type ChildSummary struct {
	Session string    `json:"session"`
	Agent   string    `json:"agent"`
	State   string    `json:"state"`
	Run     string    `json:"run,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	Number  int       `json:"number"`
	Runs    int       `json:"runs"`
	Reason  string    `json:"reason,omitempty"`
	Started time.Time `json:"started,omitzero"`
}

// JobSummary is a background job as its jobs worker reports it.
type JobSummary struct {
	ID      string `json:"id"`
	Program string `json:"program"`
	Command string `json:"command"`
	// Status is "running", "exited", "killed", "timed_out", "failed" or
	// "lost"; ExitCode and Ended are set once it ended.
	Status   string    `json:"status"`
	ExitCode int       `json:"exit_code"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	Lines    int       `json:"lines"`
	Bytes    int64     `json:"bytes"`
	// Foreground: a command of the live run is waiting for it right now.
	Foreground bool `json:"foreground,omitempty"`
	// Line is the job's one-line description.
	Line string `json:"line"`
}

// JobOutputRequest reads a job's output (the query of
// GET /v1/sessions/{session}/jobs/{id}/output): Grep set searches it
// (RE2), Tail set returns its last Tail lines, otherwise Limit lines
// (default 200) from line Offset (1-based).
type JobOutputRequest struct {
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Tail   int    `json:"tail,omitempty"`
	Grep   string `json:"grep,omitempty"`
	// Name (agents) names a profile; Profile (agents "put") is its body.
	Name    string `json:"name,omitempty"`
	Profile *Agent `json:"profile,omitempty"`
	// Approval names an approval (approvals "decide"); Decision, Answer
	// and Input are DecisionRequest's (Reason too). Without Session,
	// approvals "list" lists the tenant's.
	Approval string          `json:"approval,omitempty"`
	Decision string          `json:"decision,omitempty"`
	Answer   string          `json:"answer,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
}

// JobOutput holds lines of a job's output, as cleaned and redacted when
// the job wrote them. For a grep, Lines are numbered "n: text" and Matched
// counts every match; otherwise Offset is the number of the first line
// returned, Total the lines written so far and More says lines follow.
type JobOutput struct {
	Lines   []string   `json:"lines"`
	Offset  int        `json:"offset,omitempty"`
	Total   int        `json:"total"`
	More    bool       `json:"more,omitempty"`
	Matched int        `json:"matched,omitempty"`
	Job     JobSummary `json:"job"`
}

// Transcript paging: a page holds DefaultTranscriptLimit entries unless
// the request asks for another number, at most MaxTranscriptLimit.
const (
	DefaultTranscriptLimit = 100
	MaxTranscriptLimit     = 500
)

// TranscriptPage answers GET /v1/sessions/{session}/transcript: entries
// in the order they were recorded, redacted as a person may read them.
type TranscriptPage struct {
	Session string            `json:"session"`
	Entries []TranscriptEntry `json:"entries"`
	// Next is the after of the next page: the last entry's id, or the
	// request's after when the page is empty.
	Next uint64 `json:"next"`
	// More says entries follow this page.
	More bool `json:"more"`
}

// TranscriptEntry is one record of a session's transcript.
type TranscriptEntry struct {
	// ID is the entry's stable identity: it never changes, and ids grow in
	// the order entries were recorded (they are not contiguous).
	ID uint64 `json:"id"`
	// Kind is "message" (a turn), "run_started" (a run began; it carries the
	// run's first turn), "run_ended", "refused" (an event refused, never
	// shown to the model), "answered" (an event delivered as the result of
	// the call that waited for it: a sub-agent's end, by agent_start) or
	// "boundary" (a compaction folded the history).
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
	Run  string    `json:"run,omitempty"`
	// Role ("user" or "assistant"), MessageKind (empty for an ordinary turn;
	// "notice", "reminder", "compact_summary", …) and Content are the turn's,
	// when the entry carries one. Tool results travel in user turns.
	Role        string            `json:"role,omitempty"`
	MessageKind string            `json:"message_kind,omitempty"`
	Content     []TranscriptBlock `json:"content,omitempty"`
	// Delivers are the CE ids of the events this turn handed to the model.
	Delivers []string `json:"delivers,omitempty"`
	// Cause is a run's cause (run_started); Reason why it ended (run_ended)
	// or why an event was refused (refused), whose id and type are Event
	// and Type.
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	Event  string `json:"event,omitempty"`
	Type   string `json:"type,omitempty"`
	// Error is the model provider's error a run ended on (run_ended,
	// reason model_error), redacted.
	Error string `json:"error,omitempty"`
	// Usage is the model's token use for an assistant turn.
	Usage *TranscriptUsage `json:"usage,omitempty"`
	// From says who or what each event a run's first turn delivers came
	// from (run_started): "person", "job", "sub-agent", "parent", "steer",
	// "timer" or "event", in Delivers order. A turn delivering none of a
	// person's lines is not the person's words.
	From []string `json:"from,omitempty"`
	// Agent and AgentVersion name the agent profile and its version a run
	// went by (run_started; empty for a run recorded before profiles).
	Agent        string `json:"agent,omitempty"`
	AgentVersion uint64 `json:"agent_version,omitempty"`
	// MCP are the MCP servers of the run's profile that were not running
	// as it ended — failed, restarting after a crash, stopped — with why
	// (run_ended).
	MCP []MCPServerState `json:"mcp,omitempty"`
}

// TranscriptBlock is one part of a turn. Only the fields of its Type are
// set: text and thinking have Text; tool_use has ID, Name and Input (the
// arguments); tool_result has ToolUseID, Content and IsError; Images
// counts the pictures an image block or a tool result held (they are not
// served here).
type TranscriptBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Images    int             `json:"images,omitempty"`
}

// TranscriptUsage is token accounting as the provider reported it.
type TranscriptUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// The agent profile's types live in pkg/control/agents, where profiles
// are validated and stored; the wire names alias them.
type (
	Agent          = agents.Profile
	AgentModel     = agents.Model
	AgentTools     = agents.Tools
	AgentMCPServer = agents.MCPServer
	AgentLimits    = agents.Limits
	MCPServerState = agents.MCPServerState
)

// AgentList answers GET /v1/agents: the tenant's profiles by name, the
// default one always among them.
type AgentList struct {
	Agents []Agent `json:"agents"`
}

// AgentDeleted answers DELETE /v1/agents/{name}.
type AgentDeleted struct {
	Deleted bool `json:"deleted"`
}

// Approval is a tool call or a question waiting for (or decided by) a
// person: GET /v1/sessions/{session}/approvals.
type Approval struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	// Kind is "tool" (may this call run?) or "question" (ask_person).
	Kind string `json:"kind"`
	// Tool and Input (redacted) are the held call's.
	Tool  string          `json:"tool,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// Question and Choices are the model's question.
	Question string   `json:"question,omitempty"`
	Choices  []string `json:"choices,omitempty"`
	// Run is the run that asked.
	Run string `json:"run"`
	// Approvers is who may decide: "tenant" or "admins".
	Approvers   string    `json:"approvers"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// State is pending, approved, rejected, answered, expired, executing
	// or done.
	State    string            `json:"state"`
	Decision *ApprovalDecision `json:"decision,omitempty"`
}

// ApprovalDecision is who decided what, and when: the approval record's
// own type (pkg/control/approvals), its input redacted on the way out.
type ApprovalDecision = approvals.Decision

// ApprovalList answers GET /v1/sessions/{session}/approvals and
// GET /v1/approvals.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// DecisionRequest is POST /v1/sessions/{session}/approvals/{id}: Decision
// is "approve" (Input, if set, replaces the call's input), "reject" (with
// a Reason the model reads) or "answer" (a question's Answer).
type DecisionRequest struct {
	Decision string          `json:"decision"`
	Reason   string          `json:"reason,omitempty"`
	Answer   string          `json:"answer,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
}
