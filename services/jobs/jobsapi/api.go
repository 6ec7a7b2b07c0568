// Package jobsapi is the wire contract of the jobs service: the micro
// service name, the request subjects, and the JSON bodies of every endpoint.
// The worker (package jobs) serves it and the client (package jobs/client)
// speaks it; neither imports the other, so a runner that only asks for
// jobs does not link the process-containment code.
package jobsapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/tasks"
	"jetway/pkg/workspace"
)

const (
	// ServiceName is the NATS micro service every worker registers
	// (`nats micro ls` shows one instance per worker).
	ServiceName = "jetway-jobs"
	// SubjectPrefix starts every request subject:
	// jetway.jobs.<worker>.<op>.
	SubjectPrefix = "jetway.jobs"
	// MetadataWorker is the service metadata key holding the worker id, so
	// a client that discovers workers through $SRV.PING knows their
	// subjects.
	MetadataWorker = "worker"
)

// The operations (the last subject token).
const (
	OpStart       = "start"        // StartRequest → StartResponse: a background job
	OpRun         = "run"          // StartRequest → StartResponse: a foreground command
	OpStatus      = "status"       // WaitRequest → WaitResponse: wait up to a timeout
	OpOutput      = "output"       // OutputRequest → OutputResponse: lines, grep or tail
	OpKill        = "kill"         // JobRequest → Job
	OpKillSession = "kill_session" // SessionRequest → ListResponse
	OpList        = "list"         // SessionRequest → ListResponse
	OpGet         = "get"          // JobRequest → Job (does not count as the model seeing an end)
	OpChildState  = "child_state"  // ChildStateRequest → ChildStateResponse
	OpHandOff     = "hand_off"     // HandOffRequest → HandOffResponse
	OpRead        = "read"         // ReadRequest → workspace.ReadResult (lines, or with Images an image whole)
	OpWrite       = "write"        // WriteRequest → workspace.WriteResult
	OpEdit        = "edit"         // EditRequest → workspace.EditResult
	OpGlob        = "glob"         // GlobRequest → workspace.GlobResult
	OpGrep        = "grep"         // GrepRequest → workspace.GrepResult
	// The MCP stdio server ops (mcp.go).
	OpMCPOpen   = "mcp_open"   // MCPOpenRequest → MCPOpenResponse
	OpMCPSend   = "mcp_send"   // MCPSendRequest → MCPEmpty
	OpMCPRecv   = "mcp_recv"   // MCPRecvRequest → MCPRecvResponse
	OpMCPClose  = "mcp_close"  // MCPConnRequest → MCPEmpty
	OpMCPState  = "mcp_state"  // SessionRequest → MCPStateResponse
	OpMCPReport = "mcp_report" // MCPReportRequest → MCPEmpty
)

// Ops lists every operation, in the order the worker registers them.
var Ops = []string{
	OpStart, OpRun, OpStatus, OpOutput, OpKill, OpKillSession, OpList, OpGet,
	OpChildState, OpHandOff, OpRead, OpWrite, OpEdit, OpGlob, OpGrep,
	OpMCPOpen, OpMCPSend, OpMCPRecv, OpMCPClose, OpMCPState, OpMCPReport,
}

// Subject is the request subject of op on worker: jetway.jobs.<worker>.<op>.
func Subject(worker, op string) string {
	return SubjectPrefix + "." + worker + "." + op
}

// ValidWorkerID checks a worker id: it is one subject token and one path
// element, so it follows the same rule as tenants and sessions.
func ValidWorkerID(id string) error {
	return events.ValidateToken("worker", id)
}

// SessionRequest names a session; every request embeds it.
type SessionRequest struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	// Lineage is a sub-agent's ancestors, root first (the session
	// record's lineage), sent by a runner with the requests that start
	// something (start, run, mcp_open): a Ground Stop of any ancestor
	// covers the sub-agent, and the worker, which cannot read session
	// records, learns here whose switch that is. Empty for a root session.
	Lineage []string `json:"lineage,omitempty"`
	// Fence is the run that asks, by id, on requests that act for it
	// (start, run, write, edit, mcp_open, mcp_send): the worker refuses
	// them unless the session
	// record names that run as the session's live run, so a run that was
	// taken over — its runner frozen or cut off while another recovered the
	// session — starts nothing more. Empty: not asked for a run (an
	// operator's tool, a benchmark); nothing is checked.
	Fence string `json:"fence,omitempty"`
}

// MaxLineage bounds a request's lineage, well past the deepest sub-agent
// tree a profile may allow.
const MaxLineage = 16

// Validate checks the ids against the subject token rule.
func (r SessionRequest) Validate() error {
	if err := events.ValidateToken("tenant", r.Tenant); err != nil {
		return err
	}
	if len(r.Lineage) > MaxLineage {
		return fmt.Errorf("lineage: %d sessions, at most %d", len(r.Lineage), MaxLineage)
	}
	for _, s := range r.Lineage {
		if err := events.ValidateToken("lineage session", s); err != nil {
			return err
		}
	}
	if r.Fence != "" {
		if err := events.ValidateToken("fence", r.Fence); err != nil {
			return err
		}
	}
	return events.ValidateToken("session", r.Session)
}

// StartRequest starts a shell command in the session's workspace.
type StartRequest struct {
	SessionRequest
	// Command runs as `sh -c Command` in the workspace directory.
	Command string `json:"command"`
	// TimeoutMS (run only) is how long the call waits for the command to
	// end before leaving it running in the background; 0 means the worker's
	// default (120 s).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// ExpectedMS is how long the command should take; past it (and each
	// doubling) the worker publishes io.jetway.job.overdue. 0: never.
	ExpectedMS int64 `json:"expected_ms,omitempty"`
	// Run tags the command as a foreground command of that agent run (see
	// OpChildState).
	Run string `json:"run,omitempty"`
	// Network is what the command may reach of the network, from the
	// session's agent profile: "none" (also ""), "outbound" or "all".
	Network string `json:"network,omitempty"`
}

// StartResponse answers start and run.
type StartResponse struct {
	Job Job `json:"job"`
	// Ended (run only): the command ended within the timeout; Output holds
	// the end of its output and the end is not announced again by an event.
	Ended bool `json:"ended,omitempty"`
	// Backgrounded (run only): the command was still running at the
	// timeout and goes on as background job Job.ID; its end is announced
	// by an io.jetway.job.exited event.
	Backgrounded bool `json:"backgrounded,omitempty"`
	// HandedOff (run only): the run stopped waiting (a steer, the run's
	// end) and handed the command off (OpHandOff) before the timeout.
	// With Backgrounded it goes on as a background job whose end is an
	// ordinary io.jetway.job.exited notice; with Ended it had ended and
	// this answer carries its end.
	HandedOff bool `json:"handed_off,omitempty"`
	// Output is the last lines of the output (run only), at most
	// MaxRunOutputBytes; OmittedLines were left out before them.
	Output       string `json:"output,omitempty"`
	OmittedLines int    `json:"omitted_lines,omitempty"`
}

// MaxRunOutputBytes caps the output a run answer carries; the rest stays in
// the job's output file (OpOutput).
const MaxRunOutputBytes = 32 << 10

// JobRequest names one job of a session.
type JobRequest struct {
	SessionRequest
	ID string `json:"id"`
}

// WaitRequest asks for a job's status, waiting up to TimeoutMS for it to end
// (or, for a function task, to report progress).
type WaitRequest struct {
	JobRequest
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// WaitResponse is how the wait ended: "ended", "timed out" or "updated"
// (tasks.WaitOutcome's names).
type WaitResponse struct {
	Job     Job    `json:"job"`
	Outcome string `json:"outcome"`
}

// OutputRequest reads a job's output file: Grep set searches it (RE2),
// Tail set returns its last Tail lines, otherwise Limit lines from Offset
// (1-based).
type OutputRequest struct {
	JobRequest
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Grep   string `json:"grep,omitempty"`
	Tail   int    `json:"tail,omitempty"`
}

// DefaultOutputLines is how many lines an output request without a limit
// returns.
const DefaultOutputLines = 200

// OutputResponse holds lines of output. For a grep, Lines are numbered
// "n: text" and Matched counts every match; otherwise Offset is the number
// of the first line returned, Total the lines written so far and More says
// lines follow.
type OutputResponse struct {
	Lines   []string `json:"lines"`
	Offset  int      `json:"offset,omitempty"`
	Total   int      `json:"total"`
	More    bool     `json:"more,omitempty"`
	Matched int      `json:"matched,omitempty"`
	Job     Job      `json:"job"`
}

// ListResponse lists jobs in start order.
type ListResponse struct {
	Jobs []Job `json:"jobs"`
}

// ChildStateRequest asks whether run Run's foreground commands are gone.
type ChildStateRequest struct {
	SessionRequest
	Run string `json:"run"`
}

// BoundElsewhere is a worker's refusal of a request for a session bound to
// another worker: a client that cached the old binding (it moved while the
// worker was away) reads the binding again and asks the right worker.
func BoundElsewhere(sid, owner, worker string) *Error {
	return &Error{Code: CodeConflict, Message: fmt.Sprintf("session %s is bound to worker %s, not %s", sid, owner, worker)}
}

// IsBoundElsewhere says err is a BoundElsewhere refusal.
func IsBoundElsewhere(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeConflict && strings.Contains(e.Message, " is bound to worker ")
}

// HandOffRequest hands a run's foreground commands to the background:
// the run that waits for them was interrupted (a steer, the run's end),
// and its waits end now instead of at their timeouts. Fence must name Run:
// a run that is no longer its session's live run hands nothing off, so a
// recovering runner still finds its commands in the foreground and kills
// them.
type HandOffRequest struct {
	SessionRequest
	Run string `json:"run"`
}

// HandOffResponse lists the run's commands whose waits were ended.
type HandOffResponse struct {
	Jobs []Job `json:"jobs"`
}

// ChildStateResponse is the answer, with the run's jobs. State is "gone"
// when none of the run's commands is still in the foreground, "alive" when
// one is, and "unknown" when the worker lost one in a restart.
type ChildStateResponse struct {
	State handover.ChildState `json:"state"`
	Jobs  []Job               `json:"jobs,omitempty"`
}

// The file requests: a session plus the workspace request.
type (
	ReadRequest struct {
		SessionRequest
		workspace.ReadRequest
	}
	WriteRequest struct {
		SessionRequest
		workspace.WriteRequest
	}
	EditRequest struct {
		SessionRequest
		workspace.EditRequest
	}
	GlobRequest struct {
		SessionRequest
		workspace.GlobRequest
	}
	GrepRequest struct {
		SessionRequest
		workspace.GrepRequest
	}
)

// Job is a job as the service reports it: the task snapshot (without the
// worker's host path), the program its headline names, and its one-line
// description (tasks.Describe). Info.SessionID is the session id alone.
type Job struct {
	tasks.Info
	Tenant  string `json:"tenant"`
	Program string `json:"program"`
	// Foreground: a run call is waiting for it right now.
	Foreground bool   `json:"foreground,omitempty"`
	Line       string `json:"line"`
}

// Program is the name a headline shows for a command: its first word
// after any NAME=value assignments, without directories ("go test ./..."
// is "go", "FOO=1 /usr/bin/make -j4" is "make"); "sh" when there is none.
func Program(command string) string {
	for _, f := range strings.Fields(command) {
		if i := strings.IndexByte(f, '='); i > 0 && !strings.ContainsAny(f[:i], "/'\"$") {
			continue
		}
		f = strings.Trim(f, `'"(`)
		if i := strings.LastIndexByte(f, '/'); i >= 0 {
			f = f[i+1:]
		}
		if f != "" {
			return f
		}
	}
	return "sh"
}

// Error codes, as HTTP statuses: micro error codes are strings, and these
// read the same in `nats req` output and in logs.
const (
	CodeBadRequest  = http.StatusBadRequest          // the request is malformed or refused (names what)
	CodeNotFound    = http.StatusNotFound            // unknown job, or no such file
	CodeConflict    = http.StatusConflict            // a limit is reached, or the session is bound elsewhere
	CodeInternal    = http.StatusInternalServerError // anything else
	CodeUnavailable = http.StatusServiceUnavailable  // the worker is stopping, or none answers
	CodeNotYet      = http.StatusTooEarly            // an MCP server is still being prepared (its npx package installing): ask again
)

// Sentinels matched (errors.Is) by an *Error of the same code.
var (
	ErrBadRequest  = errors.New("bad request")
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrInternal    = errors.New("internal error")
	ErrUnavailable = errors.New("unavailable")
)

// Error is an error answer of the service.
type Error struct {
	Code    int
	Op      string // the operation, when known
	Message string
	// NoResponders: the worker's subject had no subscriber at all (the
	// worker is not running), as opposed to a worker that answered.
	NoResponders bool
}

func (e *Error) Error() string {
	if e.Op != "" {
		return fmt.Sprintf("jobs %s: %s", e.Op, e.Message)
	}
	return "jobs: " + e.Message
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Code == CodeBadRequest
	case ErrNotFound:
		return e.Code == CodeNotFound
	case ErrConflict:
		return e.Code == CodeConflict
	case ErrInternal:
		return e.Code == CodeInternal
	case ErrUnavailable:
		return e.Code == CodeUnavailable
	}
	return false
}
