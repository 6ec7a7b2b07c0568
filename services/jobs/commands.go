package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"jetway/pkg/handover"
	"jetway/pkg/redact"
	"jetway/pkg/tasks"
	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs/jobsapi"
)

// maxSummary caps the command text a task line and a headline show.
const maxSummary = 200

// summary is the command on one line, redacted, cut to maxSummary. It is
// the one source of what a job's record, list line, events and headline
// show of its command, so a secret in the command (export KEY=…, curl -u)
// is redacted here once; the command runs as written. Redaction comes
// before the cut, which could leave a secret too short to be recognised.
func summary(command string) string {
	s := redact.Text(strings.Join(strings.Fields(command), " "))
	if len(s) > maxSummary {
		cut := maxSummary
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// command builds `sh -c command` in the session's workspace with an
// environment built from nothing (see passedEnv) and its marker, and the
// confinement it runs in (nil where the worker allows unconfined jobs).
func (w *Worker) command(ctx context.Context, r jobsapi.StartRequest) (*exec.Cmd, string, *proctree.Confinement, error) {
	if strings.TrimSpace(r.Command) == "" {
		return nil, "", nil, badRequest("command is empty")
	}
	if strings.ContainsRune(r.Command, 0) {
		return nil, "", nil, badRequest("command holds a NUL byte")
	}
	if r.TimeoutMS < 0 || r.ExpectedMS < 0 {
		return nil, "", nil, badRequest("timeout_ms and expected_ms may not be negative")
	}
	if err := checkNetwork(r.Network); err != nil {
		return nil, "", nil, err
	}
	if w.conf.base == nil && !w.cfg.AllowUnconfined {
		return nil, "", nil, w.errUnconfined()
	}
	if err := w.refuseGrounded(r.SessionRequest, "no command starts"); err != nil {
		return nil, "", nil, err
	}
	if err := w.checkFence(ctx, r.SessionRequest, "command "+summary(r.Command)); err != nil {
		return nil, "", nil, err
	}
	ws, err := w.workspaceOf(ctx, r.SessionRequest)
	if err != nil {
		return nil, "", nil, err
	}
	tmp, err := w.tmpDir(r.Tenant, r.Session)
	if err != nil {
		return nil, "", nil, err
	}
	cmd := exec.Command(w.cfg.Shell, "-c", r.Command)
	cmd.Dir = ws.Dir()
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	cmd.Env = append([]string{
		"PATH=" + path,
		"HOME=" + ws.Dir(),
		"TMPDIR=" + tmp,
		"SHELL=" + w.cfg.Shell,
		"LANG=C.UTF-8",
		"TERM=dumb",
		"JETWAY_TENANT=" + r.Tenant,
		"JETWAY_SESSION=" + r.Session,
	}, passedEnv()...)
	cmd.Env = append(cmd.Env, w.cfg.Env...)
	cmd.Env = append(cmd.Env, WorkerEnv+"="+w.marker())
	return cmd, sessionKey(r.Tenant, r.Session), w.jobConfinement(ws.Dir(), tmp, r.Network), nil
}

// opStart starts a background job; the answer goes out once its record's
// write is on the connection ahead of it (persistSent), so a job the caller
// heard of survives a worker restart as a record (reported lost if it never
// ended) without the answer waiting a round trip for the acknowledgement.
func (w *Worker) opStart(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.StartRequest](data)
	if err != nil {
		return nil, err
	}
	cmd, sid, conf, err := w.command(ctx, r)
	if err != nil {
		return nil, err
	}
	i, err := w.mgr.Start(tasks.WithSession(ctx, sid), w.shellSpec(r, sid, cmd, conf))
	if err != nil {
		return nil, tooMany(err)
	}
	w.recheckGrounded(r.SessionRequest)
	<-w.out.persistSent(taskKey(sid, i.ID))
	return jobsapi.StartResponse{Job: w.wire(i)}, nil
}

// shellSpec is the task of a shell command: its summary, confinement,
// expected duration, run, and the note naming the workspace's disk cap
// when the command ended with the workspace full.
func (w *Worker) shellSpec(r jobsapi.StartRequest, sid string, cmd *exec.Cmd, conf *proctree.Confinement) tasks.Spec {
	return tasks.Spec{
		Kind: "shell", Summary: summary(r.Command), Cmd: cmd, Confine: conf,
		Expected: ms(r.ExpectedMS), RunID: r.Run, Fence: r.Fence, EndNote: w.diskNote(sid),
	}
}

// tooMany turns the manager's refusal of one more command into words the
// model can act on; other errors pass unchanged.
func tooMany(err error) error {
	var tm *tasks.TooManyRunningError
	if !errors.As(err, &tm) {
		return err
	}
	return &jobsapi.Error{Code: jobsapi.CodeConflict, Message: fmt.Sprintf(
		"refused: this session already runs %d commands at once, foreground and background (the jobs worker's limit, --max-running, is %d); "+
			"wait for one to end (shell_job_status with wait) or stop one (shell_job_kill), then run this again", tm.Running, tm.Limit)}
}

// opRun runs a foreground command: its place under MaxRunning is reserved
// first, so every live process tree counts against the limit, a command
// that outlives its wait included (it was 10 such against a limit of 4,
// each with its own memory cap). It is started contained and adopted as a
// task at once (tasks.Manager's Adopt: an id, an output file, the manager
// owns the tree), then waited for up to the timeout. One that ends in time
// is answered with its output and its end is not announced again; one
// still running simply stays a background job, with no moment at which it
// belongs to nobody.
func (w *Worker) opRun(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.StartRequest](data)
	if err != nil {
		return nil, err
	}
	timeout := w.cfg.RunTimeout
	if r.TimeoutMS > 0 {
		timeout = min(ms(r.TimeoutMS), w.cfg.MaxRunTimeout)
	}
	cmd, sid, conf, err := w.command(ctx, r)
	if err != nil {
		return nil, err
	}
	// The run counts as having a foreground command from before the start
	// until the wait is over, so child_state never misses it.
	runKey := sid + "\x00" + r.Run
	w.mu.Lock()
	w.fgRuns[runKey]++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.fgRuns[runKey]--; w.fgRuns[runKey] <= 0 {
			delete(w.fgRuns, runKey)
		}
		w.mu.Unlock()
	}()

	// A hand-off of the run (handoff.go) ends the wait below early; one
	// that came first means the run was interrupted before this command
	// started, and it does not start.
	ho, leave := w.joinHandOff(runKey)
	defer leave()
	if ho.done.Err() != nil {
		return nil, errHandedOff(r.Run)
	}
	place, err := w.mgr.Reserve(sid)
	if err != nil {
		return nil, tooMany(err)
	}
	defer place.Release() // a no-op once the task took it over
	i, release, err := w.adopt(ctx, sid, cmd, w.shellSpec(r, sid, cmd, conf), place)
	if err != nil {
		return nil, err
	}
	tk := taskKey(sid, i.ID)
	w.mu.Lock()
	w.fgTasks[tk] = true
	w.mu.Unlock()
	release()
	w.recheckGrounded(r.SessionRequest) // after release: a kill waits for the end
	// On the connection before the answer, as a Start's: the outbox waits
	// for the acknowledgement (and retries) while the command runs.
	<-w.out.persistSent(tk)
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	defer context.AfterFunc(ho.done, stopWait)()
	id := i.ID
	i, outcome, err := w.mgr.Wait(wctx, sid, id, timeout)
	handedOff := ho.done.Err() != nil && ctx.Err() == nil
	if err != nil && handedOff {
		// The hand-off ended the wait, not a failure: answer with the
		// command as it is now.
		i, outcome, err = w.mgr.Wait(ctx, sid, id, 0)
	}
	w.mu.Lock()
	delete(w.fgTasks, tk)
	heldBack := w.fgEnded[tk]
	delete(w.fgEnded, tk)
	w.mu.Unlock()
	if err != nil {
		w.out.persist(tk)
		return nil, err
	}
	if outcome != tasks.WaitEnded && heldBack {
		// It ended after the wait gave up but before it left the
		// foreground: its end was held back, so this answer reports it.
		i, outcome, err = w.mgr.Wait(ctx, sid, i.ID, 0)
		if err != nil {
			return nil, err
		}
	}
	if outcome != tasks.WaitEnded {
		w.out.persist(tk) // no longer in the foreground
		return jobsapi.StartResponse{Job: w.wire(i), Backgrounded: true, HandedOff: handedOff}, nil
	}
	res := jobsapi.StartResponse{Job: w.wire(i), Ended: true, HandedOff: handedOff}
	res.Output, res.OmittedLines, err = lastOutput(i)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// adopt starts cmd in the manager's process host, its output on one pipe
// (stdout and stderr in order), and hands it to the manager. The command's
// end reaches the manager only after release is called, so the caller can
// mark the task as waited for before its end could be announced.
func (w *Worker) adopt(ctx context.Context, sid string, cmd *exec.Cmd, spec tasks.Spec, place *tasks.Reservation) (tasks.Info, func(), error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return tasks.Info{}, nil, fmt.Errorf("jobs: output pipe: %w", err)
	}
	held := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(held) }) }
	cmd.Stdout, cmd.Stderr = pw, pw
	var out tasks.Handoff
	started := time.Now()
	tree, err := w.mgr.Host().StartConfined(cmd, w.mgr.Limits().Tree, spec.Confine)
	// The child has its own copy of the write end (or never started): a
	// failed close of ours changes nothing the reader sees.
	_ = pw.Close()
	if err != nil {
		_ = pr.Close() // unread; the start error is the one to report
		return tasks.Info{}, nil, fmt.Errorf("jobs: start %q: %w", spec.Summary, err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&out, pr)
	}()
	waited := make(chan error, 1)
	go func() {
		err := tree.Wait()
		// What the root left behind must not hold the pipe open.
		if kerr := tree.Kill(); kerr != nil && err == nil {
			err = kerr
		}
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
		// Ends the copy's read; the output it copied is all there is.
		_ = pr.Close()
		<-copied
		<-held
		waited <- err
	}()
	i, err := w.mgr.Adopt(tasks.WithSession(ctx, sid), spec, tasks.RunningCommand{
		Cmd: cmd, Tree: tree, AttachOutput: out.Attach, Wait: waited, Started: started, Reservation: place,
	})
	if err != nil {
		release()
		_ = tree.Kill()
		// Waits for the tree to be gone; how a killed tree ended says
		// nothing, and Adopt's error is the one to report.
		ended := <-waited
		_ = ended
		tree.Close()
		return tasks.Info{}, nil, err
	}
	return i, release, nil
}

// lastOutput is the end of a finished command's output for a run answer:
// at most jobsapi.MaxRunOutputBytes, whole lines, and how many lines came
// before.
func lastOutput(i tasks.Info) (string, int, error) {
	const maxLines = 2000
	offset := max(1, i.Lines-maxLines+1)
	lines, _, _, err := tasks.ReadLines(i.Path, offset, maxLines)
	if err != nil {
		return "", 0, fmt.Errorf("jobs: read output of %s: %w", i.ID, err)
	}
	size, k := 0, len(lines)
	for k > 0 && size+len(lines[k-1])+1 <= jobsapi.MaxRunOutputBytes {
		size += len(lines[k-1]) + 1
		k--
	}
	return strings.Join(lines[k:], "\n"), offset - 1 + k, nil
}

// childState answers whether run's foreground commands are gone: alive
// while a run call of it waits (or is about to), unknown when one of its
// commands was in the foreground when a previous incarnation of this worker
// went away, gone otherwise. A session's commands all run on this worker,
// and a restart kills the survivors it can identify, so "gone" holds for a
// run this worker never saw too. A command that outlived its run call is a
// background job: the run was told its id, and it no longer counts.
func (w *Worker) childState(sid, run string) (handover.ChildState, []tasks.Info) {
	var jobs []tasks.Info
	for _, i := range w.mgr.List(sid) {
		if i.RunID == run {
			jobs = append(jobs, i)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fgRuns[sid+"\x00"+run] > 0 {
		return handover.ChildAlive, jobs
	}
	for _, i := range jobs {
		if w.fgTasks[taskKey(sid, i.ID)] && i.Status == tasks.Running {
			return handover.ChildAlive, jobs
		}
	}
	for _, i := range jobs {
		if i.Status == tasks.Lost && w.lostFG[taskKey(sid, i.ID)] {
			return handover.ChildUnknown, jobs
		}
	}
	return handover.ChildGone, jobs
}

// StartFunc starts a function task (a watch loop, a hook) for a session, in
// process: it is listed and waited for like a command, and its
// Reporter.Notify notices and its end are published as job events numbered
// with a TaskRef, so a newer one supersedes an older one the runner has not
// delivered yet.
func (w *Worker) StartFunc(ctx context.Context, tenant, session string, spec tasks.Spec) (jobsapi.Job, error) {
	if spec.Run == nil || spec.Cmd != nil {
		return jobsapi.Job{}, errors.New("jobs: StartFunc needs a Spec with Run and no Cmd")
	}
	select {
	case <-w.ready:
	default:
		return jobsapi.Job{}, errors.New("jobs: StartFunc before the worker is ready")
	}
	s := jobsapi.SessionRequest{Tenant: tenant, Session: session}
	if err := s.Validate(); err != nil {
		return jobsapi.Job{}, err
	}
	sid, err := w.ensureBound(ctx, s)
	if err != nil {
		return jobsapi.Job{}, err
	}
	if spec.Kind == "" {
		spec.Kind = "func"
	}
	i, err := w.mgr.Start(tasks.WithSession(ctx, sid), spec)
	if err != nil {
		return jobsapi.Job{}, err
	}
	w.out.persist(taskKey(sid, i.ID))
	return w.wire(i), nil
}
