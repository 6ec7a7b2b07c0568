package jobs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/events"
	"jetway/pkg/tasks"
	"jetway/services/jobs/jobsapi"
)

// Record is a task as the jetway_jobs bucket keeps it: the job as the
// service reports it, with the output file's path (so a restarted worker
// still serves it) and the worker that owns it.
type Record struct {
	jobsapi.Job
	Worker string `json:"worker"`
	// EventKey is the task's random event key (eventID), kept so a
	// restarted worker reports the task's events under the same ids.
	EventKey string `json:"event_key,omitempty"`
}

// eventID is the CloudEvents id (and so the Nats-Msg-Id) of one occasion of
// one task: "jetway.job/<tenant>/<session>/<id>/<key>/<what>", key being
// random per task and kept in its record. Stable, so that a retry, or a
// restart re-reporting an end it may already have published, is
// deduplicated by JetStream (JETWAY_JOBEVENTS) and by the runner (a CE id
// already in the session's transcript). Unpredictable, so that nobody can
// send an event with a job's future id ahead of it: the runner would take
// the real exit for a repeat of what it already delivered, and drop it.
// A task restored from a record made before keys keeps the old form.
func eventID(sid, id, key, what string) string {
	if key == "" {
		return "jetway.job/" + sid + "/" + id + "/" + what
	}
	return "jetway.job/" + sid + "/" + id + "/" + key + "/" + what
}

// eventKey is the task's event key, made on first use: 64 random bits.
func (w *Worker) eventKey(tk string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.eventKeys[tk]
	if !ok {
		k = randHex(8)
		w.eventKeys[tk] = k
	}
	return k
}

// taskEventID is eventID for the task i.
func (w *Worker) taskEventID(i tasks.Info, what string) string {
	return eventID(i.SessionID, i.ID, w.eventKey(taskKey(i.SessionID, i.ID)), what)
}

// program is what a task's headline calls it: a command's first word, a
// function task's kind.
func program(i tasks.Info) string {
	if i.Kind == "shell" || i.Kind == "" {
		return jobsapi.Program(i.Summary)
	}
	return i.Kind
}

func jobNumber(id string) uint64 {
	n, _ := strconv.ParseUint(id, 10, 64)
	return n
}

// isFunc reports whether the task is a function task, whose notices are
// numbered (TaskRef) so a newer one supersedes an older one.
func isFunc(i tasks.Info) bool { return i.Kind != "shell" && i.Kind != "" }

func (w *Worker) nextSeq(tk string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seqs[tk]++
	return w.seqs[tk]
}

// onNotice publishes a notice the manager left: an end the model did not
// see (exited), or a function task's Reporter.Notify (io.jetway.job.notice
// carrying the report, numbered so the next one supersedes it). The
// manager's own notice queue is emptied: the events are the notices here.
//
// An end while a run call waits for the command is not published: the
// call answers with it. (The manager would publish an end that comes
// between adopting the command and the call's Wait starting.)
func (w *Worker) onNotice(i tasks.Info) {
	w.mgr.TakeNotices(i.SessionID)
	tk := taskKey(i.SessionID, i.ID)
	if i.Notice == "" {
		w.mu.Lock()
		fg := w.fgTasks[tk]
		if fg {
			w.fgEnded[tk] = true
		}
		w.mu.Unlock()
		if fg {
			return
		}
	}
	if i.Notice != "" {
		seq := w.nextSeq(tk)
		w.emit(i, w.taskEventID(i, "notice/"+strconv.FormatUint(seq, 10)), events.JobNotice{
			ID: jobNumber(i.ID), Program: program(i), RunningForMS: events.ElapsedMS(i.Duration()),
			Text: i.Notice, TaskRef: events.TaskRef{Task: i.ID, Seq: seq},
		})
		return
	}
	w.emitExited(i)
}

func (w *Worker) emitExited(i tasks.Info) {
	var ref events.TaskRef
	if isFunc(i) {
		ref = events.TaskRef{Task: i.ID, Seq: w.nextSeq(taskKey(i.SessionID, i.ID))}
	}
	w.emit(i, w.taskEventID(i, "exited"), events.JobExited{
		ID: jobNumber(i.ID), Program: program(i), ExitStatus: i.ExitCode,
		RunningForMS: events.ElapsedMS(i.Duration()), Tail: strings.Join(i.Tail, "\n"),
		Status: events.JobStatus(i.Status), TaskRef: ref,
	})
}

// onOverdue publishes io.jetway.job.overdue, once per threshold the
// manager reports (the expected duration, then each doubling).
func (w *Worker) onOverdue(i tasks.Info) {
	tk := taskKey(i.SessionID, i.ID)
	w.mu.Lock()
	w.overdues[tk]++
	n := w.overdues[tk]
	w.mu.Unlock()
	var ref events.TaskRef
	if isFunc(i) {
		ref = events.TaskRef{Task: i.ID, Seq: w.nextSeq(tk)}
	}
	w.emit(i, w.taskEventID(i, "overdue/"+strconv.Itoa(n)), events.JobOverdue{
		ID: jobNumber(i.ID), Program: program(i), RunningForMS: events.ElapsedMS(i.Duration()),
		Tail: strings.Join(i.Tail, "\n"), TaskRef: ref,
	})
}

// onEnd records the end. While the worker shuts down it also publishes the
// end: Close kills the tasks without the model seeing it (no request can
// see an end then: they are drained first; a task that ended on its own
// just before was published already, and the stable id drops the repeat).
func (w *Worker) onEnd(i tasks.Info) {
	tk := taskKey(i.SessionID, i.ID)
	w.mu.Lock()
	delete(w.overdues, tk)
	w.mu.Unlock()
	if w.closing.Load() {
		w.emitExited(i)
	}
	w.out.persist(tk)
}

func (w *Worker) emit(i tasks.Info, id string, p events.Payload) {
	tenant, session := splitSession(i.SessionID)
	msg, err := buildEvent(tenant, session, w.cfg.Source, id, p)
	if err != nil {
		w.cfg.Log.Error().Err(err).Str("session", i.SessionID).Str("task", i.ID).Msg("jobs: build event")
		return
	}
	w.out.publish(taskKey(i.SessionID, i.ID), msg)
}

func buildEvent(tenant, session, source, id string, p events.Payload) (*nats.Msg, error) {
	e, err := events.New(tenant, session, source, p)
	if err != nil {
		return nil, err
	}
	e.SetID(id)
	subject, err := events.JobEventsSubject(tenant, session)
	if err != nil {
		return nil, err
	}
	return events.Encode(context.Background(), subject, e)
}

// job is the service's view of a task.
func (w *Worker) job(i tasks.Info) jobsapi.Job {
	tk := taskKey(i.SessionID, i.ID)
	w.mu.Lock()
	fg := w.fgTasks[tk]
	w.mu.Unlock()
	line := tasks.Describe(i)
	tenant, session := splitSession(i.SessionID)
	i.SessionID = session
	return jobsapi.Job{Info: i, Tenant: tenant, Program: program(i), Foreground: fg, Line: line}
}

// wire is the job as answered over NATS: the host path stays on the worker.
func (w *Worker) wire(i tasks.Info) jobsapi.Job {
	j := w.job(i)
	j.Path = ""
	return j
}

func (w *Worker) wireAll(is []tasks.Info) []jobsapi.Job {
	out := make([]jobsapi.Job, 0, len(is))
	for _, i := range is {
		out = append(out, w.wire(i))
	}
	return out
}

// record is the outbox's view of a task: its bucket key and JSON.
func (w *Worker) record(tk string) (string, []byte, bool) {
	cut := strings.LastIndexByte(tk, '/')
	sid, id := tk[:cut], tk[cut+1:]
	i, err := w.mgr.Get(sid, id)
	if err != nil {
		return "", nil, false
	}
	b, err := json.Marshal(Record{Job: w.job(i), Worker: w.cfg.WorkerID, EventKey: w.eventKey(tk)})
	if err != nil {
		return "", nil, false
	}
	return recordKey(sid, id), b, true
}

// loadRecords reads the records of this worker's tasks: every job record
// that names it, whether or not the job's session is still bound here. A
// session whose worker stayed away too long is rebound to another worker,
// and its jobs that were running here must still end here (as lost): read
// only through the bindings, they stayed "running" for ever.
func (w *Worker) loadRecords(ctx context.Context) ([]Record, error) {
	err := eachEntry(ctx, w.bindKV, nil, func(e jetstream.KeyValueEntry) {
		if string(e.Value()) == w.cfg.WorkerID {
			w.bound[strings.Replace(e.Key(), ".", "/", 1)] = true
		}
	})
	if err != nil {
		return nil, err
	}
	var out []Record
	err = eachEntry(ctx, w.jobsKV, nil, func(e jetstream.KeyValueEntry) {
		var r Record
		if json.Unmarshal(e.Value(), &r) != nil || r.Worker != w.cfg.WorkerID {
			return
		}
		out = append(out, r)
	})
	return out, err
}

// eachEntry calls fn for every current entry of kv (matching filters, or
// all). A one-shot read at start, not a mirror: nothing here follows the
// bucket afterwards, and a failed read must fail the start, not retry.
func eachEntry(ctx context.Context, kv jetstream.KeyValue, filters []string, fn func(jetstream.KeyValueEntry)) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var watch jetstream.KeyWatcher
	var err error
	if filters == nil {
		watch, err = kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	} else {
		watch, err = kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	}
	if err != nil {
		return fmt.Errorf("jobs: read bucket %s: %w", kv.Bucket(), err)
	}
	// Stopping only unsubscribes; a failure (the connection is gone)
	// leaves nothing behind to deliver to.
	defer func() { _ = watch.Stop() }()
	for {
		select {
		case e, ok := <-watch.Updates():
			if !ok || e == nil {
				return nil
			}
			fn(e)
		case <-ctx.Done():
			return fmt.Errorf("jobs: read bucket %s: %w", kv.Bucket(), ctx.Err())
		}
	}
}

// restore hands the records to the manager: ended tasks are listed as they
// were, running ones become lost (and are published as such), and each
// session's id counter continues past them.
func (w *Worker) restore(records []Record) {
	infos := make([]tasks.Info, 0, len(records))
	for _, r := range records {
		i := r.Info
		i.SessionID = sessionKey(r.Tenant, i.SessionID)
		w.mu.Lock()
		w.eventKeys[taskKey(i.SessionID, i.ID)] = r.EventKey
		w.mu.Unlock()
		if (i.Status == tasks.Running || i.Status == "") && r.Foreground {
			w.mu.Lock()
			w.lostFG[taskKey(i.SessionID, i.ID)] = true
			w.mu.Unlock()
		}
		infos = append(infos, i)
	}
	slices.SortFunc(infos, func(a, b tasks.Info) int {
		if c := strings.Compare(a.SessionID, b.SessionID); c != 0 {
			return c
		}
		return int(jobNumber(a.ID)) - int(jobNumber(b.ID))
	})
	w.mgr.Restore(infos)
}

// killSurvivors SIGKILLs every process that carries this worker's marker
// value (a previous incarnation's commands, whose worker is gone) and waits,
// briefly, for them to go. It returns how many it found.
func killSurvivors(marker string) int {
	kv := []byte(WorkerEnv + "=" + marker + "\x00")
	self := os.Getpid()
	var found []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !containsEnv(env, kv) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		found = append(found, pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range found {
		for processLive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return len(found)
}

// containsEnv reports whether the NUL-separated environment holds kv
// (which ends in NUL) as a whole entry.
func containsEnv(env, kv []byte) bool {
	for len(env) > 0 {
		if len(env) >= len(kv) && string(env[:len(kv)]) == string(kv) {
			return true
		}
		i := slices.Index(env, 0)
		if i < 0 {
			return false
		}
		env = env[i+1:]
	}
	return false
}

// processLive reports whether pid runs (a zombie has ended).
func processLive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// marker is the value of WorkerEnv for this worker: its id and a hash of
// its root, so two workers that share an id by mistake (or in tests) on one
// machine do not take each other's commands for survivors.
func (w *Worker) marker() string {
	sum := sha256.Sum256([]byte(w.cfg.Root))
	return w.cfg.WorkerID + "-" + hex.EncodeToString(sum[:4])
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
