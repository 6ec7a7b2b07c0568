package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"

	"jetway/pkg/tasks/proctree"
)

// DefaultLimits: 4 running per session, 2 hours each, 64 MiB of output.
var DefaultLimits = Limits{MaxRunning: 4, MaxDuration: 2 * time.Hour, MaxOutputBytes: 64 << 20}

var (
	// ErrUnknownTask is returned for an id the session does not have.
	ErrUnknownTask = errors.New("unknown task")
	// ErrClosed is returned by Start and Adopt after Close.
	ErrClosed = errors.New("tasks: manager closed")
	// ErrTooManyRunning is returned by Start when the session already runs
	// Limits.MaxRunning tasks.
	ErrTooManyRunning = errors.New("tasks: too many running tasks")
)

// TooManyRunningError is the ErrTooManyRunning of one session: how many of
// its tasks run (or are starting) and the limit, so a refusal can say both.
type TooManyRunningError struct {
	Session        string
	Running, Limit int
}

func (e *TooManyRunningError) Error() string {
	return fmt.Sprintf("%v: session %s runs %d (limit %d)", ErrTooManyRunning, e.Session, e.Running, e.Limit)
}

// Is makes errors.Is(err, ErrTooManyRunning) hold.
func (e *TooManyRunningError) Is(target error) bool { return target == ErrTooManyRunning }

// Limits bound the tasks of a manager.
type Limits struct {
	// MaxRunning is how many tasks of one session may run at once.
	MaxRunning int
	// MaxDuration ends a task that runs longer.
	MaxDuration time.Duration
	// MaxOutputBytes stops writing a task's output file past this size.
	MaxOutputBytes int64
	// Tree caps the memory, process count and CPU time of a command task's
	// process tree when its Spec.Limits is zero; the zero value is no limit.
	Tree proctree.Limits
}

// Config sets up a Manager.
type Config struct {
	Limits Limits
	// Output names the output file of a task and its ref (a handle the
	// model can pass to other tools, e.g. "out:<session>:<hex>"). Required;
	// Files.Output is a ready one.
	Output func(sessionID, taskID string) (path, ref string, err error)
	// Session returns the session a call belongs to; nil uses SessionFrom.
	Session func(ctx context.Context) string
	// OnNotice, when set, is called for every notice left pending: a task
	// that ended unseen, or a running task's Reporter.Notify (e.g. to wake an
	// idle chat). It runs in the task's goroutine and must not block.
	OnNotice func(Info)
	// Clean cleans output lines of tasks whose Spec.Clean is nil (e.g.
	// decoding, ANSI stripping, secret redaction); nil keeps valid UTF-8.
	Clean func(line []byte) string
	// AppendClean, when set, is used instead of Clean: it appends the
	// cleaned line to dst and returns the extended slice, so that a line
	// that needs no change costs a copy and no allocation
	// (redact.AppendCleanLine). A Spec.Clean still wins for its task.
	AppendClean func(dst, line []byte) []byte
	// Unchanged, when set, reports whether every line of a block of lines
	// ('\n'-separated) comes out of the cleaner (Clean or AppendClean) as it
	// is; such a block is then copied whole instead of line by line. It may
	// answer false when unsure, never true wrongly (redact.Unchanged). Not
	// used for a task with its own Spec.Clean.
	Unchanged func(text []byte) bool
	// CleanTail, when set, rewrites an Info's Tail where its lines, each
	// cleaned alone, only together show what must not be shown (a private
	// key's last body line; redact.Lines). It runs on every snapshot, so
	// every record, event and notice gets the same tail.
	CleanTail func(lines []string) []string
	// Proc configures process containment: the SIGTERM-to-SIGKILL grace
	// period, whether to use cgroups, the logger.
	Proc proctree.Config
}

// Status is where a task is in its life.
type Status string

const (
	Running  Status = "running"
	Exited   Status = "exited"    // the command ended by itself (any exit code)
	Killed   Status = "killed"    // Kill or Close ended it
	TimedOut Status = "timed_out" // it ran past Limits.MaxDuration
	Failed   Status = "failed"    // it could not be waited for (rare), or a function task returned an error
	// Lost is a task a restarted worker found unfinished in its records: its
	// end was never observed (see MarkLost and Manager.Restore).
	Lost Status = "lost"
)

// Info is a snapshot of a task.
type Info struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Kind      string    `json:"kind"`
	Summary   string    `json:"summary"`
	Status    Status    `json:"status"`
	ExitCode  int       `json:"exit_code"`
	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended,omitzero"`
	// Bytes and Lines count what was written to the output file.
	Bytes     int64  `json:"bytes"`
	Lines     int    `json:"lines"`
	Truncated bool   `json:"truncated,omitempty"` // output past MaxOutputBytes was dropped
	Path      string `json:"path"`
	Ref       string `json:"ref"`
	// Tail is the last lines of the output (up to 20 lines / 4 KiB).
	Tail []string `json:"tail,omitempty"`
	// Error is why a function task failed.
	Error string `json:"error,omitempty"`
	// Progress and Counters are what a function task reported (Reporter).
	Progress string            `json:"progress,omitempty"`
	Counters map[string]int    `json:"counters,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Notice is set on a notice of a running task (TakeNotices): its text.
	// Empty on an end notice.
	Notice string `json:"notice,omitempty"`
	// RunID is the agent run that started the task as a foreground command
	// (Spec.RunID); see Manager.RunTasks.
	RunID string `json:"run_id,omitempty"`
	// Fence is the run the task was started for, as its host checked it
	// was the session's live run (Spec.Fence): kept with the task so an
	// audit can show from the record alone that no command started for a
	// run that had been taken over.
	Fence string `json:"fence,omitempty"`
	// Limit names the resource limit that ended the task, if one did.
	Limit string `json:"limit,omitempty"`
}

// Duration is how long the task ran (so far, while running).
func (i Info) Duration() time.Duration {
	if i.Started.IsZero() {
		return 0
	}
	if i.Ended.IsZero() {
		return time.Since(i.Started)
	}
	return i.Ended.Sub(i.Started)
}

// MarkLost turns the persisted snapshot of a task that was running when its
// worker stopped into a lost one, ended at at. Ended tasks are returned as
// they are.
func MarkLost(i Info, at time.Time) Info {
	if i.Status != Running && i.Status != "" {
		return i
	}
	i.Status = Lost
	i.Ended = at
	i.ExitCode = -1
	i.Notice = ""
	return i
}

// ProcessTree owns a command's process group or Windows job object. It is
// passed when a foreground command is adopted so ownership of the already
// started process tree moves to the manager without opening a kill window.
// *proctree.Tree implements it.
type ProcessTree interface {
	Kill() error
	Close()
	// Started assigns a start suspended process to the tree (Windows) and
	// resumes it; it returns an error if the process could not join, and the
	// caller then ends it and reports a failed command.
	Started() error
	// Exceeded reports whether a resource limit ended a process of the tree.
	Exceeded() bool
}

// Reporter is what a function task (Spec.Run) tells the manager while it
// runs. Progress also returns a Wait on the task (WaitUpdated), taking a
// notice left before it: report a step as Count, Notify, then Progress.
type Reporter interface {
	// Notify leaves a notice for the model now, while the task keeps running
	// (e.g. a watch whose result changed). A newer notice of the same task
	// replaces one the host has not taken yet.
	Notify(text string)
	// Progress sets a short state shown with the task (e.g. "run 5, exit 0").
	Progress(text string)
	// Count sets a named counter reported with the task (Info.Counters).
	Count(name string, n int)
	// Label sets a named text reported with the task (Info.Labels), e.g. the
	// session a sub-agent ran in. Unlike Progress it returns no Wait.
	Label(name, value string)
}

// RunFunc is a function task: it writes its output to out (line by line,
// cleaned like a command's) and returns its exit code. ctx is cancelled by
// Kill, by Limits.MaxDuration and by Close; a non-nil error marks it failed.
type RunFunc func(ctx context.Context, out io.Writer, r Reporter) (exitCode int, err error)

// RunningCommand is a command that has already been started by its caller.
// AttachOutput must atomically switch the command's output to the supplied
// writer, including bytes written before the handoff (Handoff does this).
type RunningCommand struct {
	Cmd          *exec.Cmd
	Tree         ProcessTree
	AttachOutput func(io.Writer)
	Wait         <-chan error
	Started      time.Time
	// MaxDuration is measured from Started; zero uses the manager limit.
	MaxDuration time.Duration
	// Reservation, when set, is the place under Limits.MaxRunning the
	// caller took (Manager.Reserve) before starting the command: the task
	// takes it over, so the command counted from before it started.
	Reservation *Reservation
}

// Spec is one task to start: a command (Cmd) or a function (Run).
type Spec struct {
	Kind    string // "shell", "watch", "hook"
	Summary string // what it runs, shown in lists and notices
	// Cmd is ready to Start (path, args, dir, env); its Stdout, Stderr and
	// SysProcAttr are set by the manager.
	Cmd *exec.Cmd
	// Limits caps the memory, process count and CPU time of Cmd and its whole
	// process tree (tools.shell_limits); the zero value uses Limits.Tree.
	Limits proctree.Limits
	// Confine, when set, is the file system Cmd's tree may reach (see
	// proctree.Confinement); nil confines nothing.
	Confine *proctree.Confinement
	// LimitNotice, when set, is asked for the line to write to the task output
	// when the command ended after a limit: it gets whether the system ended a
	// process of the tree, the exit code and the last lines of the output (what a
	// refused allocation printed). An empty answer writes nothing.
	LimitNotice func(terminated bool, exitCode int, output string) string
	// EndNote, when set, is asked for a line to write last in the task
	// output when the command ends (after any limit note), given the exit
	// code and the last lines of the output: the host names a limit the
	// kernel enforced and the manager cannot see (a full workspace's disk
	// cap). An empty answer writes nothing.
	EndNote func(exitCode int, output string) string
	// Run is a function task, instead of Cmd.
	Run RunFunc
	// NoEndNotice: the task reports what matters through Reporter.Notify,
	// so its end leaves no notice (a Stop hook run).
	NoEndNotice bool
	// Clean turns raw output into text for the file and the tail, one line
	// at a time (no trailing newline); nil uses Config.Clean.
	Clean func(line []byte) string
	// Expected is how long the task should take; past it the overdue
	// callback (SetOnOverdue) fires, and again at each doubling (2×, 4×, …),
	// so a stuck task is reported a few times, not every tick. Zero: never.
	Expected time.Duration
	// RunID tags the task as a foreground command of that agent run, so a
	// recovering runner can ask whether the run's commands are gone
	// (Manager.RunTasks).
	RunID string
	// Fence is the run the task was started on behalf of, foreground or
	// background, once the host checked that run was still live; reported
	// as Info.Fence and nowhere acted on by the manager.
	Fence string
}

// WaitOutcome is how a Wait returned.
type WaitOutcome int

const (
	WaitTimedOut WaitOutcome = iota // still running after the timeout
	WaitEnded                       // the task ended; its notices are taken (Info.Notice: its last report)
	// WaitUpdated: a running function task reported progress (a watch
	// finished a run); a notice it left is taken into Info.Notice.
	WaitUpdated
)

func (o WaitOutcome) String() string {
	switch o {
	case WaitEnded:
		return "ended"
	case WaitUpdated:
		return "updated"
	default:
		return "timed out"
	}
}

// ChildState answers whether a run's foreground commands are gone.
type ChildState int

const (
	// ChildUnknown: this manager has no complete record of the run's
	// commands (none seen, or one was lost with a previous worker).
	ChildUnknown ChildState = iota
	// ChildGone: every foreground command of the run has ended.
	ChildGone
	// ChildRunning: at least one is still running.
	ChildRunning
)

func (c ChildState) String() string {
	switch c {
	case ChildGone:
		return "gone"
	case ChildRunning:
		return "running"
	default:
		return "unknown"
	}
}

type sessionKey struct{}

// WithSession returns ctx carrying the session id that SessionFrom (the
// default Config.Session) reads.
func WithSession(ctx context.Context, sessionID string) context.Context {
	return context.WithValue(ctx, sessionKey{}, sessionID)
}

// SessionFrom returns the session id WithSession put in ctx, or "".
func SessionFrom(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(string)
	return s
}
