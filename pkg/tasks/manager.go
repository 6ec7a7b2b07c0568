package tasks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"jetway/pkg/tasks/proctree"
)

// Manager owns the background tasks of one host process.
type Manager struct {
	cfg     Config
	lim     Limits
	host    *proctree.Host
	hostErr error

	mu        sync.Mutex
	sessions  map[string]*session
	closed    bool
	onEnd     func(Info)
	onOverdue func(Info)
	wg        sync.WaitGroup // task goroutines

	spares spares // output files made ahead of time
}

type session struct {
	next     int
	starting int // registered, not yet published
	tasks    []*task
	byID     map[string]*task
	notices  []Info
}

// task is one task's state. Fields after the first group are guarded by
// Manager.mu.
type task struct {
	m      *Manager
	spec   Spec
	out    *output       // nil for a restored task
	tree   ProcessTree   // nil for a function task
	cancel func()        // function tasks: cancels their context
	done   chan struct{} // closed when the task has ended and info is final
	maxDur time.Duration // measured from info.Started
	exited chan endResult

	info    Info
	reason  Status        // Killed or TimedOut once an end was requested
	endNote string        // a line to write last in the output (KillSessionNow)
	seen    bool          // the end was seen through Wait or Kill
	waiters int           // Waits in progress: an end they see is no notice
	update  chan struct{} // closed and replaced by Reporter.Progress
	// lastReport is a Notify text still pending when the task ended (the
	// end notice replaced it); a Wait that sees the end returns it.
	lastReport string
}

// endResult is how a task's command or function ended.
type endResult struct {
	code int
	err  error // the command could not be waited for, or the function failed
	// abandoned: a function ignored its cancelled context past the grace.
	abandoned bool
}

// NewManager returns a Manager; cfg.Output is required. Containment is
// detected here and logged through cfg.Proc.Log.
func NewManager(cfg Config) *Manager {
	lim := cfg.Limits
	if lim.MaxRunning <= 0 {
		lim.MaxRunning = DefaultLimits.MaxRunning
	}
	if lim.MaxDuration <= 0 {
		lim.MaxDuration = DefaultLimits.MaxDuration
	}
	if lim.MaxOutputBytes <= 0 {
		lim.MaxOutputBytes = DefaultLimits.MaxOutputBytes
	}
	if cfg.Proc.Grace <= 0 {
		cfg.Proc.Grace = 5 * time.Second
	}
	m := &Manager{cfg: cfg, lim: lim, sessions: map[string]*session{}}
	m.host, m.hostErr = proctree.NewHost(cfg.Proc)
	return m
}

// Limits returns the effective limits.
func (m *Manager) Limits() Limits { return m.lim }

// Host is the process containment the manager starts commands in. A caller
// running a foreground command it may later hand over (Adopt) starts it
// here, so the tree is contained from birth.
func (m *Manager) Host() *proctree.Host { return m.host }

// SessionOf returns the session of ctx (Config.Session).
func (m *Manager) SessionOf(ctx context.Context) string {
	if m.cfg.Session != nil {
		return m.cfg.Session(ctx)
	}
	return SessionFrom(ctx)
}

// SetOnEnd sets a function told (in the task's goroutine) of every task that
// ends, seen or not, e.g. to record it in the trace; the latest call wins.
func (m *Manager) SetOnEnd(fn func(Info)) {
	m.mu.Lock()
	m.onEnd = fn
	m.mu.Unlock()
}

// SetOnOverdue sets a function told (in the task's goroutine) when a running
// task passes its Spec.Expected duration and each doubling of it, e.g. to
// publish a job-overdue event; the latest call wins.
func (m *Manager) SetOnOverdue(fn func(Info)) {
	m.mu.Lock()
	m.onOverdue = fn
	m.mu.Unlock()
}

func (m *Manager) sessionLocked(id string) *session {
	s := m.sessions[id]
	if s == nil {
		s = &session{byID: map[string]*task{}}
		m.sessions[id] = s
	}
	return s
}

// Start runs spec in the background for the session of ctx and returns its
// snapshot at once.
func (m *Manager) Start(ctx context.Context, spec Spec) (Info, error) {
	sid := m.SessionOf(ctx)
	if sid == "" {
		return Info{}, errors.New("tasks: start: no session in context")
	}
	if (spec.Cmd == nil) == (spec.Run == nil) {
		return Info{}, errors.New("tasks: start: a spec needs exactly one of Cmd and Run")
	}
	if spec.Cmd != nil && m.host == nil {
		return Info{}, fmt.Errorf("tasks: start: no process host: %w", m.hostErr)
	}
	t, err := m.register(sid, spec, admitCheck, nil, time.Now(), m.lim.MaxDuration)
	if err != nil {
		return Info{}, err
	}
	if spec.Cmd != nil {
		if err := m.startCommand(t); err != nil {
			m.abort(t)
			return Info{}, err
		}
	} else {
		m.startFunc(ctx, t)
	}
	m.publish(t)
	go m.supervise(t)
	return m.snapshot(t), nil
}

// admission is how register counts a new task against MaxRunning.
type admission int

const (
	admitCheck    admission = iota // refuse past MaxRunning (Start)
	admitFree                      // do not check (Adopt without a reservation)
	admitReserved                  // the place was reserved (Adopt with a Reservation)
)

// register allocates the task's id and output file. The task is not listed
// until publish; until then it counts against MaxRunning through
// session.starting (a reservation's place becomes the task's), and Close
// waits for it through the WaitGroup.
func (m *Manager) register(sid string, spec Spec, admit admission, res *Reservation, started time.Time, maxDur time.Duration) (*task, error) {
	if m.cfg.Output == nil {
		return nil, errors.New("tasks: Config.Output is not set")
	}
	kind := spec.Kind
	if kind == "" {
		kind = "shell"
		if spec.Run != nil {
			kind = "func"
		}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	s := m.sessionLocked(sid)
	switch admit {
	case admitCheck:
		if n := m.runningLocked(s); n >= m.lim.MaxRunning {
			m.mu.Unlock()
			return nil, &TooManyRunningError{Session: sid, Running: n, Limit: m.lim.MaxRunning}
		}
		s.starting++
	case admitReserved:
		if res.used {
			m.mu.Unlock()
			return nil, errors.New("tasks: adopt: the reservation was released or used")
		}
		res.used = true // its place in s.starting is the task's now
	default:
		s.starting++
	}
	s.next++
	m.wg.Add(1) // released when supervise returns, or by abort
	id := strconv.Itoa(s.next)
	m.mu.Unlock()
	t := &task{
		m: m, spec: spec, maxDur: maxDur,
		done:   make(chan struct{}),
		exited: make(chan endResult, 2),
		update: make(chan struct{}),
		info: Info{
			ID: id, SessionID: sid, Kind: kind, Summary: spec.Summary,
			Status: Running, Started: started, RunID: spec.RunID, Fence: spec.Fence,
		},
	}
	path, ref, err := m.cfg.Output(sid, id)
	if err != nil {
		m.abort(t)
		return nil, fmt.Errorf("tasks: output file for %s/%s: %w", sid, id, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		m.abort(t)
		return nil, fmt.Errorf("tasks: output dir: %w", err)
	}
	f, err := m.spares.create(path)
	if err != nil {
		m.abort(t)
		return nil, fmt.Errorf("tasks: output file: %w", err)
	}
	var clean func(dst, line []byte) []byte
	switch {
	case spec.Clean != nil:
		clean = appendWith(spec.Clean)
	case m.cfg.AppendClean != nil:
		clean = m.cfg.AppendClean
	case m.cfg.Clean != nil:
		clean = appendWith(m.cfg.Clean)
	}
	t.out = newOutput(f, clean, m.lim.MaxOutputBytes)
	if spec.Clean == nil {
		t.out.unchanged = m.cfg.Unchanged
	}
	t.info.Path, t.info.Ref = path, ref
	return t, nil
}

// runningLocked counts the session's tasks that run or are starting (and
// the places reserved for commands about to start); m.mu is held.
func (m *Manager) runningLocked(s *session) int {
	n := s.starting
	for _, t := range s.tasks {
		if t.info.Status == Running {
			n++
		}
	}
	return n
}

// abort forgets a registered task that never started, giving its id back
// when no later one was taken.
func (m *Manager) abort(t *task) {
	if t.out != nil {
		t.out.close()
		_ = os.Remove(t.info.Path)
	}
	m.mu.Lock()
	s := m.sessions[t.info.SessionID]
	s.starting--
	if strconv.Itoa(s.next) == t.info.ID {
		s.next--
	}
	m.mu.Unlock()
	m.wg.Done()
}

// publish lists a started task. One that started while Close ran is ended
// at once: nothing outlives the manager.
func (m *Manager) publish(t *task) {
	m.mu.Lock()
	s := m.sessions[t.info.SessionID]
	s.starting--
	s.tasks = append(s.tasks, t)
	s.byID[t.info.ID] = t
	closed := m.closed
	m.mu.Unlock()
	if closed {
		m.requestEnd(t, Killed)
	}
}

// startCommand starts the command with stdout and stderr on one pipe, so
// the file keeps their order, and copies the pipe into the output file.
func (m *Manager) startCommand(t *task) error {
	cmd := t.spec.Cmd
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("tasks: output pipe: %w", err)
	}
	growPipe(r)
	cmd.Stdout, cmd.Stderr = w, w
	lim := t.spec.Limits
	if lim.IsZero() {
		lim = m.lim.Tree
	}
	tree, err := m.host.StartConfined(cmd, lim, t.spec.Confine)
	// The child has its own copy of the write end (or never started): a
	// failed close of ours changes nothing the reader sees.
	_ = w.Close()
	if err != nil {
		_ = r.Close() // unread; the start error is the one to report
		return fmt.Errorf("tasks: start %q: %w", t.spec.Summary, err)
	}
	t.tree = tree
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		t.out.readFrom(r)
	}()
	go func() {
		err := tree.Wait()
		// The root is gone; what it left behind belongs to the task and
		// must not outlive it (it would also hold the pipe open).
		if kerr := tree.Kill(); kerr != nil && err == nil {
			err = kerr
		}
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
			// A writer that left the tree still holds the pipe.
		}
		// Ends readFrom's read; the output it copied is all there is.
		_ = r.Close()
		<-copied
		t.exited <- commandResult(err)
	}()
	return nil
}

// commandResult turns exec's error into an exit code, shell style: a
// signal is 128+n.
func commandResult(err error) endResult {
	if err == nil {
		return endResult{}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return endResult{code: 128 + int(ws.Signal())}
		}
		return endResult{code: ee.ExitCode()}
	}
	return endResult{code: -1, err: err}
}

func (m *Manager) startFunc(ctx context.Context, t *task) {
	fctx, cancel := context.WithCancel(WithSession(context.WithoutCancel(ctx), t.info.SessionID))
	t.cancel = cancel
	go func() {
		code, err := t.spec.Run(fctx, t.out, reporter{t})
		t.exited <- endResult{code: code, err: err}
	}()
}

// supervise waits for the task's end while enforcing MaxDuration and telling
// the overdue callback, then records the end.
func (m *Manager) supervise(t *task) {
	defer m.wg.Done()
	var deadline <-chan time.Time
	if t.maxDur > 0 {
		tm := time.NewTimer(time.Until(t.info.Started.Add(t.maxDur)))
		defer tm.Stop()
		deadline = tm.C
	}
	var overdue <-chan time.Time
	next := t.spec.Expected
	var ot *time.Timer
	if next > 0 {
		ot = time.NewTimer(time.Until(t.info.Started.Add(next)))
		defer ot.Stop()
		overdue = ot.C
	}
	for {
		select {
		case res := <-t.exited:
			m.finish(t, res)
			return
		case <-deadline:
			deadline = nil
			m.requestEnd(t, TimedOut)
		case <-overdue:
			m.mu.Lock()
			fn := m.onOverdue
			m.mu.Unlock()
			if fn != nil {
				fn(m.snapshot(t))
			}
			next *= 2
			ot.Reset(time.Until(t.info.Started.Add(next)))
		}
	}
}

// requestEnd starts ending a running task for reason (Killed, TimedOut)
// without waiting; the first reason wins.
func (m *Manager) requestEnd(t *task, reason Status) { m.endTask(t, reason, false) }

// endTask is requestEnd; now skips the SIGTERM grace where the tree can
// (proctree.Tree.KillNow). A function task is cancelled either way.
func (m *Manager) endTask(t *task, reason Status, now bool) {
	m.mu.Lock()
	if t.info.Status != Running || t.reason != "" {
		m.mu.Unlock()
		return
	}
	t.reason = reason
	m.mu.Unlock()
	if t.tree != nil {
		if kn, ok := t.tree.(interface{ KillNow() error }); ok && now {
			go func() { _ = kn.KillNow() }()
			return
		}
		go func() { _ = t.tree.Kill() }()
		return
	}
	t.cancel()
	// A function that ignores its context is let go after the grace period:
	// the task ends, its goroutine is abandoned and its writes are dropped.
	go func() {
		select {
		case <-t.done:
		case <-time.After(m.cfg.Proc.Grace):
			t.exited <- endResult{code: -1, abandoned: true}
		}
	}()
}

// finish records the end of a task: limit notes in its output, the final
// snapshot, the end notice unless the end was seen, the callbacks.
func (m *Manager) finish(t *task, res endResult) {
	m.mu.Lock()
	reason := t.reason
	m.mu.Unlock()
	var limit string
	if t.tree != nil {
		t.tree.Close()
		if lh, ok := t.tree.(interface{ LimitHit() string }); ok {
			limit = lh.LimitHit()
		} else if t.tree.Exceeded() {
			limit = "a resource limit"
		}
		if t.spec.LimitNotice != nil && (limit != "" || (res.code != 0 && !t.spec.Limits.IsZero())) {
			if line := t.spec.LimitNotice(limit != "", res.code, t.out.tailText()); line != "" {
				t.out.note(line)
			}
		} else if limit != "" {
			t.out.note("[tasks] ended by the " + limit)
		}
	}
	if reason == TimedOut {
		limit = "time limit (" + fmtLimit(t.maxDur) + ")"
		t.out.note("[tasks] ended: ran past the time limit (" + fmtLimit(t.maxDur) + ")")
	}
	m.mu.Lock()
	endNote := t.endNote
	m.mu.Unlock()
	if endNote != "" {
		t.out.note(endNote)
	}
	if t.spec.EndNote != nil && t.tree != nil {
		if line := t.spec.EndNote(res.code, t.out.tailText()); line != "" {
			t.out.note(line)
		}
	}
	t.out.close()

	m.mu.Lock()
	t.info.Ended = time.Now()
	t.info.ExitCode = res.code
	t.info.Limit = limit
	switch {
	case reason != "":
		t.info.Status = reason
	case res.err != nil:
		t.info.Status = Failed
		t.info.Error = res.err.Error()
	default:
		t.info.Status = Exited
	}
	if res.abandoned {
		t.info.Error = "did not stop within the grace period after its context was cancelled"
	}
	info := m.snapshotLocked(t)
	s := m.sessions[t.info.SessionID]
	for _, n := range s.notices {
		if n.ID == t.info.ID && n.Notice != "" {
			t.lastReport = n.Notice
		}
	}
	notify := !t.seen && t.waiters == 0 && !t.spec.NoEndNotice
	if notify {
		s.notices = append(dropNotices(s.notices, t.info.ID), info)
	} else if t.seen || t.waiters > 0 {
		t.seen = true
		s.notices = dropNotices(s.notices, t.info.ID)
	}
	onEnd := m.onEnd
	m.mu.Unlock()
	if notify && m.cfg.OnNotice != nil {
		m.cfg.OnNotice(info)
	}
	if onEnd != nil {
		onEnd(info)
	}
	// Done last: a Kill returns after the end was told, so an exit event
	// is published before the caller hears the task is gone.
	close(t.done)
}

func dropNotices(ns []Info, id string) []Info {
	out := ns[:0:0]
	for _, n := range ns {
		if n.ID != id {
			out = append(out, n)
		}
	}
	return out
}

func (m *Manager) snapshot(t *task) Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshotLocked(t)
}

func (m *Manager) snapshotLocked(t *task) Info {
	i := t.info
	if t.out != nil {
		st := t.out.stats()
		i.Bytes, i.Lines, i.Truncated, i.Tail = st.bytes, st.lines, st.truncated, st.tail
	} else {
		i.Tail = append([]string(nil), i.Tail...)
	}
	if m.cfg.CleanTail != nil {
		i.Tail = m.cfg.CleanTail(i.Tail)
	}
	i.Counters = maps.Clone(i.Counters)
	i.Labels = maps.Clone(i.Labels)
	return i
}

func (m *Manager) lookup(sid, id string) (*task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lookupLocked(sid, id)
}

func (m *Manager) lookupLocked(sid, id string) (*task, error) {
	if s := m.sessions[sid]; s != nil {
		if t := s.byID[id]; t != nil {
			return t, nil
		}
	}
	return nil, fmt.Errorf("tasks: %s in session %s: %w", id, sid, ErrUnknownTask)
}

// Get returns one task's snapshot.
func (m *Manager) Get(sessionID, id string) (Info, error) {
	t, err := m.lookup(sessionID, id)
	if err != nil {
		return Info{}, err
	}
	return m.snapshot(t), nil
}

// List returns the session's tasks, in start order.
func (m *Manager) List(sessionID string) []Info {
	return m.list(sessionID, false)
}

// Running returns the session's running tasks.
func (m *Manager) Running(sessionID string) []Info {
	return m.list(sessionID, true)
}

func (m *Manager) list(sid string, running bool) []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sid]
	if s == nil {
		return nil
	}
	var out []Info
	for _, t := range s.tasks {
		if !running || t.info.Status == Running {
			out = append(out, m.snapshotLocked(t))
		}
	}
	return out
}

// Wait waits up to timeout for the task to end or, for a function task, to
// report progress (Reporter.Progress): a watch never ends by itself, so
// waiting for it means waiting for its next run. What the caller saw is not
// noticed again. It answers ended only after the end was told (told); a
// ctx done before then, on a task that ended unwaited for, is an error.
func (m *Manager) Wait(ctx context.Context, sessionID, id string, timeout time.Duration) (Info, WaitOutcome, error) {
	m.mu.Lock()
	t, err := m.lookupLocked(sessionID, id)
	if err != nil {
		m.mu.Unlock()
		return Info{}, WaitTimedOut, err
	}
	if t.info.Status != Running {
		m.mu.Unlock()
		if !t.told(ctx) {
			return m.snapshot(t), WaitTimedOut, fmt.Errorf("tasks: wait for %s: %w", id, ctx.Err())
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.seeEndLocked(t), WaitEnded, nil
	}
	t.waiters++
	upd := t.update
	m.mu.Unlock()

	tm := time.NewTimer(max(timeout, 0))
	defer tm.Stop()
	select {
	case <-t.done:
	case <-upd:
	case <-tm.C:
	case <-ctx.Done():
	}

	m.mu.Lock()
	t.waiters--
	if t.info.Status != Running {
		// This Wait was counted when the task ended, so the end left no
		// notice: it is this answer's even if ctx is done.
		info := m.seeEndLocked(t)
		m.mu.Unlock()
		t.told(ctx)
		return info, WaitEnded, nil
	}
	defer m.mu.Unlock()
	select {
	case <-upd:
		info := m.snapshotLocked(t)
		s := m.sessions[sessionID]
		for _, n := range s.notices {
			if n.ID == id {
				info.Notice = n.Notice
			}
		}
		s.notices = dropNotices(s.notices, id)
		return info, WaitUpdated, nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return m.snapshotLocked(t), WaitTimedOut, fmt.Errorf("tasks: wait for %s: %w", id, err)
	}
	return m.snapshotLocked(t), WaitTimedOut, nil
}

// told waits until the end of the ended task t was told (finish closes
// t.done after OnNotice and OnEnd returned) or ctx is done, and reports
// whether it was told. A Wait answers ended only after that, as a Kill
// does: its caller acts on the answer (the jobs worker takes the task out
// of its foreground) and must not race the notice of the same end, which
// could then be published as well.
func (t *task) told(ctx context.Context) bool {
	select {
	case <-t.done:
		return true
	default:
	}
	select {
	case <-t.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// seeEndLocked marks an ended task's end as seen and takes its notices; the
// last report of a function task comes back in Notice.
func (m *Manager) seeEndLocked(t *task) Info {
	t.seen = true
	info := m.snapshotLocked(t)
	info.Notice, t.lastReport = t.lastReport, ""
	s := m.sessions[t.info.SessionID]
	for _, n := range s.notices {
		if n.ID == t.info.ID && n.Notice != "" {
			info.Notice = n.Notice
		}
	}
	s.notices = dropNotices(s.notices, t.info.ID)
	return info
}

// Kill ends the task's process tree and waits (briefly) for it to be reaped.
func (m *Manager) Kill(sessionID, id string) (Info, error) {
	t, err := m.lookup(sessionID, id)
	if err != nil {
		return Info{}, err
	}
	return m.kill(t)
}

func (m *Manager) kill(t *task) (Info, error) { return m.killWith(t, false, "") }

// killWith is kill; now skips the grace period and note, when set, is
// written last in the task's output.
func (m *Manager) killWith(t *task, now bool, note string) (Info, error) {
	m.mu.Lock()
	t.seen = true
	if note != "" && t.reason == "" && t.info.Status == Running {
		t.endNote = note
	}
	m.mu.Unlock()
	m.endTask(t, Killed, now)
	// Kill itself waits for the tree: grace, then SIGKILL, then up to 5s.
	tm := time.NewTimer(m.cfg.Proc.Grace + 10*time.Second)
	defer tm.Stop()
	select {
	case <-t.done:
	case <-tm.C:
		return m.snapshot(t), fmt.Errorf("tasks: kill %s: task did not end", t.info.ID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seeEndLocked(t), nil
}

// KillSession kills the session's running tasks and returns them.
func (m *Manager) KillSession(sessionID string) []Info {
	return m.killAll(m.runningTasks(sessionID))
}

// KillSessionNow is KillSession without the SIGTERM grace period, for an
// emergency stop (Ground Stop): each tree gets SIGKILL at once, note is
// written last in each task's output so that whoever reads the output (the
// model, in its answer or notice) learns why, and the tasks are returned
// ended. Their ends count as seen, as any Kill's: the caller tells them.
func (m *Manager) KillSessionNow(sessionID, note string) []Info {
	return m.killEach(m.runningTasks(sessionID), true, note)
}

func (m *Manager) runningTasks(sid string) []*task {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*task
	for id, s := range m.sessions {
		if sid != "" && id != sid {
			continue
		}
		for _, t := range s.tasks {
			if t.info.Status == Running {
				out = append(out, t)
			}
		}
	}
	return out
}

func (m *Manager) killAll(ts []*task) []Info { return m.killEach(ts, false, "") }

// killEach kills the tasks at once, each as killWith, and waits for all.
func (m *Manager) killEach(ts []*task, now bool, note string) []Info {
	out := make([]Info, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], _ = m.killWith(t, now, note)
		}()
	}
	wg.Wait()
	return out
}

// Close kills every running task and refuses new ones.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.mu.Unlock()
	running := m.runningTasks("")
	for _, t := range running {
		m.mu.Lock()
		t.seen = true
		m.mu.Unlock()
		m.requestEnd(t, Killed)
	}
	// The host ends every tree and, without cgroups, the orphans no tree
	// could claim, which would otherwise hold their task's output pipe open.
	if m.host != nil {
		m.host.Close()
	}
	m.killAll(running)
	m.wg.Wait()
	m.spares.close()
}

// TakeNotices returns the session's ended tasks whose notice is pending, and
// the notices running tasks left (Info.Notice set), and clears them.
func (m *Manager) TakeNotices(sessionID string) []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil {
		return nil
	}
	out := s.notices
	s.notices = nil
	return out
}

// HasNotices reports whether the session has pending notices.
func (m *Manager) HasNotices(sessionID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	return s != nil && len(s.notices) > 0
}

// ReturnNotices puts notices back into the session's pending queue (see
// TakeNotices): a host that took them for a turn which then did not deliver
// them to the model hands them back here instead of losing them. They keep
// their original order and go before the notices that arrived in the
// meantime, so the next TakeNotices returns each of them once more. A notice
// of a task that left a newer notice meanwhile (reporting again, or ending)
// is dropped, and so is the end notice of a task whose end was seen since
// through Wait or Kill.
func (m *Manager) ReturnNotices(sessionID string, infos []Info) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessionLocked(sessionID)
	var back []Info
	for _, n := range infos {
		if t := s.byID[n.ID]; t != nil {
			// An end seen through Wait or Kill is not noticed again, and a
			// task's end replaces its running reports, unless it leaves no
			// end notice (then the reports are all there is).
			if n.Notice == "" && t.seen {
				continue
			}
			if n.Notice != "" && t.info.Status != Running && !t.spec.NoEndNotice {
				continue
			}
		}
		newer := false
		for _, p := range s.notices {
			newer = newer || p.ID == n.ID
		}
		if !newer {
			back = append(back, n)
		}
	}
	s.notices = append(back, s.notices...)
}

// RunTasks answers whether the foreground commands run runID started in the
// session (Spec.RunID) are gone, with their snapshots.
func (m *Manager) RunTasks(sessionID, runID string) (ChildState, []Info) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil || runID == "" {
		return ChildUnknown, nil
	}
	var out []Info
	state := ChildGone
	for _, t := range s.tasks {
		if t.info.RunID != runID {
			continue
		}
		out = append(out, m.snapshotLocked(t))
		switch t.info.Status {
		case Running:
			state = ChildRunning
		case Lost:
			if state != ChildRunning {
				state = ChildUnknown
			}
		}
	}
	if len(out) == 0 {
		return ChildUnknown, nil
	}
	return state, out
}

// Restore records tasks a previous worker persisted, so a restarted worker
// lists them and continues their ids. Tasks that were running are marked
// Lost (their end was never seen) and, unless their end was noticed before,
// leave an end notice and are told to OnEnd like any task that ended. It
// returns what it recorded.
func (m *Manager) Restore(infos []Info) []Info {
	now := time.Now()
	var out, notices []Info
	m.mu.Lock()
	for _, in := range infos {
		s := m.sessionLocked(in.SessionID)
		if s.byID[in.ID] != nil {
			continue
		}
		wasRunning := in.Status == Running || in.Status == ""
		info := MarkLost(in, now)
		t := &task{m: m, done: make(chan struct{}), update: make(chan struct{}), info: info, seen: !wasRunning}
		close(t.done)
		s.tasks = append(s.tasks, t)
		s.byID[info.ID] = t
		if n, err := strconv.Atoi(info.ID); err == nil && n > s.next {
			s.next = n
		}
		if wasRunning {
			s.notices = append(dropNotices(s.notices, info.ID), info)
			notices = append(notices, info)
		}
		out = append(out, info)
	}
	onEnd := m.onEnd
	m.mu.Unlock()
	for _, n := range notices {
		if m.cfg.OnNotice != nil {
			m.cfg.OnNotice(n)
		}
		if onEnd != nil {
			onEnd(n)
		}
	}
	return out
}

// reporter is the Reporter of a function task.
type reporter struct{ t *task }

func (r reporter) Notify(text string) {
	t, m := r.t, r.t.m
	m.mu.Lock()
	if t.info.Status != Running {
		m.mu.Unlock()
		return
	}
	info := m.snapshotLocked(t)
	info.Notice = text
	s := m.sessions[t.info.SessionID]
	s.notices = append(dropNotices(s.notices, t.info.ID), info)
	m.mu.Unlock()
	if m.cfg.OnNotice != nil {
		m.cfg.OnNotice(info)
	}
}

func (r reporter) Progress(text string) {
	t, m := r.t, r.t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	t.info.Progress = text
	close(t.update)
	t.update = make(chan struct{})
}

func (r reporter) Count(name string, n int) {
	m := r.t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.t.info.Counters == nil {
		r.t.info.Counters = map[string]int{}
	}
	r.t.info.Counters[name] = n
}

func (r reporter) Label(name, value string) {
	m := r.t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.t.info.Labels == nil {
		r.t.info.Labels = map[string]string{}
	}
	r.t.info.Labels[name] = value
}
