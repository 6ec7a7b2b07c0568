// Package jobtools is the model's side of the jobs service: the shell
// tool and its job companions (shell_job_status, shell_job_output,
// shell_job_kill, shell_job_list) and the workspace file tools (read_file,
// write_file, edit_file, glob, grep), each a tool.Tool that calls a jobs
// worker through the client. Results are short text built around the task
// line (tasks.Describe), which is what the model reads everywhere else too.
// read_file alone may return a picture: a file whose bytes are an image
// comes back in tool.Result.Images with one line naming it.
//
// The names shell_job_status and shell_job_kill are fixed: the overdue
// notice the model reads (pkg/events) tells it to use them.
package jobtools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"jetway/pkg/agent/tool"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/pkg/workspace"
	"jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

// Tool names.
const (
	Shell     = "shell"
	JobStatus = "shell_job_status"
	JobOutput = "shell_job_output"
	JobKill   = "shell_job_kill"
	JobList   = "shell_job_list"
	ReadFile  = "read_file"
	WriteFile = "write_file"
	EditFile  = "edit_file"
	Glob      = "glob"
	Grep      = "grep"
)

// Limits of the tools' inputs, in seconds.
const (
	DefaultShellTimeout = 120
	MaxShellTimeout     = 600
	MaxStatusWait       = 600
	tailLines           = 10
)

// Tools returns the tools of one run of a session. Foreground shell
// commands are tagged with run, so a recovering runner can ask whether they
// are gone (client.ChildState); every command gets network, the network
// mode of the session's agent profile. A sub-agent's run passes its lineage
// (its ancestors, root first), sent with every request, so the worker kills
// its commands on an ancestor's Ground Stop.
func Tools(c *client.Client, tenant, session, run, network string, lineage ...string) []tool.Tool {
	t := &tools{c: c, tenant: tenant, session: session, run: run, network: network, lineage: lineage}
	return []tool.Tool{
		tool.Func{Name: Shell, Schema: shellSchema, Fn: t.shell, Description: "Run a shell command (sh -c) in the session's workspace. " +
			"By default it runs in the foreground: the result is its output, or, if it is still running after timeout seconds " +
			"(default 120), it goes on as a background job and you get its id. Set background to start a long command as a " +
			"background job at once. You get a notice when a background job ends; use shell_job_status, shell_job_output " +
			"and shell_job_kill with its id. Commands may write only in the workspace (which is $HOME) and $TMPDIR, not /tmp; " +
			"system directories are read-only, everything else outside is Permission denied; " + networkNote(network)},
		tool.Func{Name: JobStatus, Schema: statusSchema, Fn: t.status, IsReadOnly: true, Description: "Show a background job's " +
			"status and last output lines, optionally waiting up to wait seconds for it to end."},
		tool.Func{Name: JobOutput, Schema: outputSchema, Fn: t.output, IsReadOnly: true, Description: "Read a job's output: " +
			"limit lines from offset (1-based), the last tail lines, or the lines matching grep (an RE2 regular expression)."},
		tool.Func{Name: JobKill, Schema: idSchema, Fn: t.kill, Description: "Stop a background job and every process it started."},
		tool.Func{Name: JobList, Schema: emptySchema, Fn: t.list, IsReadOnly: true, Description: "List the session's jobs."},
		tool.Func{Name: ReadFile, Schema: readSchema, Fn: t.read, IsReadOnly: true, Description: "Read a file of the " +
			"workspace. A text file comes back with its lines numbered; offset (1-based) and limit select a range. " +
			"A PNG, JPEG, GIF or WebP image (up to 512 KB) comes back as the image itself, so you can look at it " +
			"(a screenshot, a chart, a rendered page); export a bigger one smaller first."},
		tool.Func{Name: WriteFile, Schema: writeSchema, Fn: t.write, Description: "Create or replace a file of the workspace."},
		tool.Func{Name: EditFile, Schema: editSchema, Fn: t.edit, Description: "Replace old_string with new_string in a file. " +
			"old_string must match exactly (whitespace included) and occur once, unless replace_all is set."},
		tool.Func{Name: Glob, Schema: globSchema, Fn: t.glob, IsReadOnly: true, Description: "List workspace files matching a " +
			"pattern such as **/*.go."},
		tool.Func{Name: Grep, Schema: grepSchema, Fn: t.grep, IsReadOnly: true, Description: "Search workspace files for lines " +
			"matching an RE2 regular expression; path limits the search to a file, directory or glob."},
	}
}

var (
	shellSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"command":{"type":"string","description":"the shell command"},` +
		`"background":{"type":"boolean","description":"start it as a background job and return at once"},` +
		`"timeout":{"type":"integer","minimum":1,"maximum":600,"description":"foreground: seconds to wait before it goes on in the background (default 120)"},` +
		`"expected":{"type":"integer","minimum":1,"description":"seconds it should take; past that you get an overdue notice"}` +
		`},"required":["command"]}`)
	idSchema     = json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer","minimum":1,"description":"the job id"}},"required":["id"]}`)
	statusSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"id":{"type":"integer","minimum":1,"description":"the job id"},` +
		`"wait":{"type":"integer","minimum":0,"maximum":600,"description":"seconds to wait for it to end (default 0)"}` +
		`},"required":["id"]}`)
	outputSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"id":{"type":"integer","minimum":1,"description":"the job id"},` +
		`"offset":{"type":"integer","minimum":1,"description":"first line, from 1"},` +
		`"limit":{"type":"integer","minimum":1,"description":"how many lines (default 200)"},` +
		`"tail":{"type":"integer","minimum":1,"description":"the last n lines instead"},` +
		`"grep":{"type":"string","description":"only lines matching this RE2 regular expression"}` +
		`},"required":["id"]}`)
	emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)
	readSchema  = json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"path relative to the workspace"},` +
		`"offset":{"type":"integer","minimum":1,"description":"first line, from 1"},` +
		`"limit":{"type":"integer","minimum":1,"description":"how many lines (default 2000)"}` +
		`},"required":["path"]}`)
	writeSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"path relative to the workspace"},` +
		`"content":{"type":"string","description":"the whole new content"}` +
		`},"required":["path","content"]}`)
	editSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"path relative to the workspace"},` +
		`"old_string":{"type":"string","description":"the exact text to replace"},` +
		`"new_string":{"type":"string","description":"the text to put instead"},` +
		`"replace_all":{"type":"boolean","description":"replace every occurrence"}` +
		`},"required":["path","old_string","new_string"]}`)
	globSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"e.g. **/*.go or cmd/*/main.go"},` +
		`"limit":{"type":"integer","minimum":1,"description":"most paths to list"}` +
		`},"required":["pattern"]}`)
	grepSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"RE2 regular expression; (?i) ignores case"},` +
		`"path":{"type":"string","description":"a file, directory or glob to search (default: the whole workspace)"},` +
		`"limit":{"type":"integer","minimum":1,"description":"most lines to show (default 100)"}` +
		`},"required":["pattern"]}`)
)

type tools struct {
	c                             *client.Client
	tenant, session, run, network string
	lineage                       []string
}

// networkNote tells the model what its commands may reach of the network.
func networkNote(network string) string {
	switch network {
	case "outbound":
		return "the network is open for outgoing connections; listening on a TCP port is refused."
	case "all":
		return "the network is open."
	}
	return "there is no network (sockets other than unix sockets in the workspace are refused)."
}

// input decodes a call's arguments into v.
func input(call tool.Call, v any) error {
	if len(call.Input) == 0 {
		return nil
	}
	if err := json.Unmarshal(call.Input, v); err != nil {
		return fmt.Errorf("invalid arguments: %w", err)
	}
	return nil
}

// answer turns a call's outcome into its result: the service's refusals
// (a bad path, an unknown job, a limit) are messages for the model, not
// failures of the tool.
func answer(text string, err error) (tool.Result, error) {
	if err == nil {
		return tool.Result{Content: text}, nil
	}
	var ae *jobsapi.Error
	if errors.As(err, &ae) {
		return tool.Result{Content: ae.Message, IsError: true}, nil
	}
	return tool.Result{}, err
}

func (t *tools) sess() jobsapi.SessionRequest {
	return jobsapi.SessionRequest{Tenant: t.tenant, Session: t.session, Lineage: t.lineage, Fence: t.run}
}

func (t *tools) shell(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Command    string `json:"command"`
		Background bool   `json:"background"`
		Timeout    int64  `json:"timeout"`
		Expected   int64  `json:"expected"`
	}
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return tool.Result{Content: "command is empty", IsError: true}, nil
	}
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = DefaultShellTimeout
	}
	timeout = min(timeout, MaxShellTimeout)
	r := jobsapi.StartRequest{SessionRequest: t.sess(), Command: in.Command, ExpectedMS: in.Expected * 1000, Network: t.network}
	if in.Background {
		res, err := t.c.Start(ctx, r)
		if err != nil {
			return answer("", err)
		}
		return answer(fmt.Sprintf("Started background job %s. You will get a notice when it ends; check it with %s (id %s), "+
			"read its output with %s, stop it with %s.\n%s", res.Job.ID, JobStatus, res.Job.ID, JobOutput, JobKill, res.Job.Line), nil)
	}
	r.TimeoutMS, r.Run = timeout*1000, t.run
	res, err := t.c.RunUntil(ctx, r, handOff)
	if ctx.Err() != nil {
		return interrupted(res, err)
	}
	if err != nil {
		return answer("", err)
	}
	if res.Backgrounded {
		var b strings.Builder
		fmt.Fprintf(&b, "Still running after %ds: it goes on in the background as job %s. You will get a notice when it ends; "+
			"check it with %s (id %s), read its output with %s, stop it with %s.\n%s",
			timeout, res.Job.ID, JobStatus, res.Job.ID, JobOutput, JobKill, res.Job.Line)
		writeTail(&b, res.Job.Tail)
		return answer(b.String(), nil)
	}
	var b strings.Builder
	b.WriteString(res.Job.Line)
	if res.OmittedLines > 0 {
		fmt.Fprintf(&b, "\n(the first %d lines are not shown; read them with %s, id %s)", res.OmittedLines, JobOutput, res.Job.ID)
	}
	if res.Output == "" {
		b.WriteString("\n(no output)")
	} else {
		b.WriteString("\n" + res.Output)
	}
	return answer(b.String(), nil)
}

// handOff says whether a foreground command whose run was interrupted goes
// on in the background: yes for a steer and for the run's end (the run's
// context cancelled plainly), no for a cancellation that speaks for itself
// — Ground Stop, under which the jobs worker kills the session's commands
// and the model reads that instead — and no for a lapse of the runner's
// lease, after which another runner may recover the run and kill its
// foreground commands as the recovery's rule says.
func handOff(cause error) bool {
	return errors.Is(cause, context.Canceled)
}

// interrupted is the result of a foreground shell call whose run was
// interrupted while it waited. What became of the command stands in the
// history (tool.Result.Stands), the job's id first, so the brief of the run
// that follows names it: handed to the background with its end to come as a
// notice, ended before the hand-off, or never started. Anything else —
// Ground Stop, a hand-off that failed — leaves the executor's Cancelled text.
func interrupted(res jobsapi.StartResponse, err error) (tool.Result, error) {
	var ae *jobsapi.Error
	switch {
	case err != nil && errors.As(err, &ae) && ae.Code == jobsapi.CodeConflict:
		return tool.Result{Content: handover.HandedOffResult + " before it started; it did not run (" + ae.Message + ")", IsError: true, Stands: true}, nil
	case err != nil || !res.HandedOff:
		return tool.Result{}, err
	case res.Backgrounded:
		var b strings.Builder
		fmt.Fprintf(&b, "%s: it goes on in the background as job %s. Its end arrives as an ordinary job notice; "+
			"check it with %s (id %s), read its output with %s, stop it with %s.\n%s",
			handover.HandedOffResult, res.Job.ID, JobStatus, res.Job.ID, JobOutput, JobKill, res.Job.Line)
		writeTail(&b, res.Job.Tail)
		return tool.Result{Content: b.String(), Stands: true}, nil
	default:
		var b strings.Builder
		fmt.Fprintf(&b, "%s, but it had already ended (job %s):\n%s", handover.HandedOffResult, res.Job.ID, res.Job.Line)
		if res.Output != "" {
			b.WriteString("\n" + res.Output)
		}
		return tool.Result{Content: b.String(), Stands: true}, nil
	}
}

func writeTail(b *strings.Builder, tail []string) {
	if len(tail) == 0 {
		return
	}
	if len(tail) > tailLines {
		tail = tail[len(tail)-tailLines:]
	}
	b.WriteString("\nLast output:\n" + strings.Join(tail, "\n"))
}

// jobID reads the id argument.
func jobID(call tool.Call) (string, error) {
	var in struct {
		ID json.Number `json:"id"`
	}
	if err := input(call, &in); err != nil {
		return "", err
	}
	n, err := strconv.ParseUint(string(in.ID), 10, 64)
	if err != nil || n == 0 {
		return "", fmt.Errorf("id %q is not a job number", in.ID)
	}
	return strconv.FormatUint(n, 10), nil
}

func (t *tools) status(ctx context.Context, call tool.Call) (tool.Result, error) {
	id, err := jobID(call)
	if err != nil {
		return tool.Result{Content: err.Error(), IsError: true}, nil
	}
	var in struct {
		Wait int64 `json:"wait"`
	}
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	wait := time.Duration(min(max(in.Wait, 0), MaxStatusWait)) * time.Second
	res, err := t.c.Status(ctx, t.tenant, t.session, id, wait)
	if err != nil {
		return answer("", err)
	}
	var b strings.Builder
	b.WriteString(res.Job.Line)
	if res.Outcome == "timed out" && wait > 0 {
		fmt.Fprintf(&b, "\n(still running after waiting %ds)", in.Wait)
	}
	if res.Job.Notice != "" {
		b.WriteString("\nReport: " + res.Job.Notice)
	}
	writeTail(&b, res.Job.Tail)
	return answer(b.String(), nil)
}

func (t *tools) output(ctx context.Context, call tool.Call) (tool.Result, error) {
	id, err := jobID(call)
	if err != nil {
		return tool.Result{Content: err.Error(), IsError: true}, nil
	}
	var in struct {
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
		Tail   int    `json:"tail"`
		Grep   string `json:"grep"`
	}
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	res, err := t.c.Output(ctx, jobsapi.OutputRequest{
		JobRequest: jobsapi.JobRequest{SessionRequest: t.sess(), ID: id},
		Offset:     max(in.Offset, 0), Limit: max(in.Limit, 0), Tail: max(in.Tail, 0), Grep: in.Grep,
	})
	if err != nil {
		return answer("", err)
	}
	var b strings.Builder
	b.WriteString(res.Job.Line + "\n")
	switch {
	case in.Grep != "":
		fmt.Fprintf(&b, "%d matching lines", res.Matched)
		if len(res.Lines) < res.Matched {
			fmt.Fprintf(&b, " (first %d shown)", len(res.Lines))
		}
	case len(res.Lines) == 0:
		fmt.Fprintf(&b, "no lines from %d (%d in all)", res.Offset, res.Total)
	default:
		fmt.Fprintf(&b, "lines %d-%d of %d", res.Offset, res.Offset+len(res.Lines)-1, res.Total)
		if res.More {
			fmt.Fprintf(&b, " (more: offset %d)", res.Offset+len(res.Lines))
		}
	}
	if len(res.Lines) > 0 {
		b.WriteString(":\n" + strings.Join(res.Lines, "\n"))
	}
	return answer(b.String(), nil)
}

func (t *tools) kill(ctx context.Context, call tool.Call) (tool.Result, error) {
	id, err := jobID(call)
	if err != nil {
		return tool.Result{Content: err.Error(), IsError: true}, nil
	}
	j, err := t.c.Kill(ctx, t.tenant, t.session, id)
	if err != nil {
		return answer("", err)
	}
	return answer(j.Line, nil)
}

func (t *tools) list(ctx context.Context, _ tool.Call) (tool.Result, error) {
	jobs, err := t.c.List(ctx, t.tenant, t.session)
	if err != nil {
		return answer("", err)
	}
	if len(jobs) == 0 {
		return answer("no jobs", nil)
	}
	lines := make([]string, len(jobs))
	for i, j := range jobs {
		lines[i] = j.Line
	}
	return answer(strings.Join(lines, "\n"), nil)
}

func (t *tools) read(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in workspace.ReadRequest
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	in.Images = true
	res, err := t.c.Read(ctx, t.tenant, t.session, in)
	if err != nil {
		return answer("", err)
	}
	if img := res.Image; img != nil {
		return tool.Result{Content: imageLine(*img), Images: []llm.Image{llm.NewImage(img.MediaType, img.Data)}}, nil
	}
	if res.TotalLines == 0 {
		return answer(res.Path+" is empty", nil)
	}
	text := strings.TrimSuffix(res.Content, "\n")
	if res.StartLine > 1 || res.EndLine < res.TotalLines {
		text += fmt.Sprintf("\n(lines %d-%d of %d)", res.StartLine, res.EndLine, res.TotalLines)
	}
	return answer(text, nil)
}

func (t *tools) write(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in workspace.WriteRequest
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	res, err := t.c.WriteFor(ctx, t.sess(), in)
	if err != nil {
		return answer("", err)
	}
	verb := "replaced"
	if res.Created {
		verb = "created"
	}
	return answer(fmt.Sprintf("%s %s (%d bytes)", verb, res.Path, res.Bytes), nil)
}

func (t *tools) edit(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Path string `json:"path"`
		Old  string `json:"old_string"`
		New  string `json:"new_string"`
		All  bool   `json:"replace_all"`
	}
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	res, err := t.c.EditFor(ctx, t.sess(), workspace.EditRequest{Path: in.Path, Old: in.Old, New: in.New, All: in.All})
	if err != nil {
		return answer("", err)
	}
	n := "1 replacement"
	if res.Replacements != 1 {
		n = strconv.Itoa(res.Replacements) + " replacements"
	}
	return answer(fmt.Sprintf("edited %s (%s)", res.Path, n), nil)
}

func (t *tools) glob(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in workspace.GlobRequest
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	res, err := t.c.Glob(ctx, t.tenant, t.session, in)
	if err != nil {
		return answer("", err)
	}
	if len(res.Paths) == 0 {
		return answer("no files match "+in.Pattern, nil)
	}
	text := strings.Join(res.Paths, "\n")
	if res.Truncated {
		text += fmt.Sprintf("\n(%d of %d shown)", len(res.Paths), res.Total)
	}
	return answer(text, nil)
}

func (t *tools) grep(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in workspace.GrepRequest
	if err := input(call, &in); err != nil {
		return tool.Result{}, err
	}
	res, err := t.c.Grep(ctx, t.tenant, t.session, in)
	if err != nil {
		return answer("", err)
	}
	if len(res.Matches) == 0 {
		return answer("no lines match "+in.Pattern, nil)
	}
	text := strings.Join(res.Matches, "\n")
	if res.Truncated {
		text += fmt.Sprintf("\n(%d of %d shown)", len(res.Matches), res.Total)
	}
	if res.Skipped > 0 {
		text += fmt.Sprintf("\n(%d binary or large files skipped)", res.Skipped)
	}
	return answer(text, nil)
}

// imageFormats names the image types in the line the model reads.
var imageFormats = map[string]string{"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}

// imageLine is the text beside an image read_file returns:
// "shot.png: PNG image, 1280×720, 84 KB" (the size in pixels left out when
// the header could not be read). The model sees the picture; the line
// names the file and what it costs.
func imageLine(img workspace.Image) string {
	format := imageFormats[img.MediaType]
	if format == "" {
		format = img.MediaType
	}
	text := img.Path + ": " + format + " image"
	if img.Width > 0 && img.Height > 0 {
		text += fmt.Sprintf(", %d×%d", img.Width, img.Height)
	}
	return text + ", " + workspace.SizeText(int64(len(img.Data)))
}
