package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"jetway/pkg/events"
	"jetway/pkg/tasks"
	"jetway/pkg/workspace"
	"jetway/services/jobs/jobsapi"
)

// opFunc serves one operation: the request body in, the answer out.
type opFunc func(ctx context.Context, data []byte) (any, error)

// startService registers the jetway-jobs micro service with an endpoint
// per operation under jetway.jobs.<worker>.
func (w *Worker) startService() (micro.Service, error) {
	svc, err := micro.AddService(w.cfg.NC, micro.Config{
		Name:        jobsapi.ServiceName,
		Version:     semver(w.cfg.Version),
		Description: "jetway jobs worker: background process trees, output files, workspaces",
		Metadata: map[string]string{jobsapi.MetadataWorker: w.cfg.WorkerID, "build": w.cfg.Version, MetadataConfinement: w.confinementInfo(),
			MetadataDiskCap: w.disks.String(), MetadataView: w.viewInfo(), MetadataLimits: limitsInfo(w.mgr.Host(), w.mgr.Limits().Tree)},
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: start micro service: %w", err)
	}
	ops := map[string]opFunc{
		jobsapi.OpStart:       w.opStart,
		jobsapi.OpRun:         w.opRun,
		jobsapi.OpStatus:      w.opStatus,
		jobsapi.OpOutput:      w.opOutput,
		jobsapi.OpKill:        w.opKill,
		jobsapi.OpKillSession: w.opKillSession,
		jobsapi.OpList:        w.opList,
		jobsapi.OpGet:         w.opGet,
		jobsapi.OpChildState:  w.opChildState,
		jobsapi.OpHandOff:     w.opHandOff,
		jobsapi.OpRead:        w.opRead,
		jobsapi.OpWrite:       w.opWrite,
		jobsapi.OpEdit:        w.opEdit,
		jobsapi.OpGlob:        w.opGlob,
		jobsapi.OpGrep:        w.opGrep,
		jobsapi.OpMCPOpen:     w.opMCPOpen,
		jobsapi.OpMCPSend:     w.opMCPSend,
		jobsapi.OpMCPRecv:     w.opMCPRecv,
		jobsapi.OpMCPClose:    w.opMCPClose,
		jobsapi.OpMCPState:    w.opMCPState,
		jobsapi.OpMCPReport:   w.opMCPReport,
	}
	g := svc.AddGroup(jobsapi.SubjectPrefix + "." + w.cfg.WorkerID)
	for _, op := range jobsapi.Ops {
		if err := g.AddEndpoint(op, w.handler(op, ops[op])); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("jobs: add endpoint %s: %w", op, err)
		}
	}
	return svc, nil
}

// handler runs each request in its own goroutine: micro calls a handler in
// its endpoint's one subscription goroutine, and a run or a status wait
// may take minutes.
func (w *Worker) handler(op string, fn opFunc) micro.HandlerFunc {
	return func(req micro.Request) {
		w.reqMu.Lock()
		if w.stopping {
			w.reqMu.Unlock()
			_ = req.Error(strconv.Itoa(jobsapi.CodeUnavailable), "worker "+w.cfg.WorkerID+" is stopping", nil)
			return
		}
		w.reqs.Add(1)
		w.reqMu.Unlock()
		go func() {
			defer w.reqs.Done()
			res, err := fn(w.reqCtx, req.Data())
			if err != nil && w.reqCtx.Err() != nil {
				err = &jobsapi.Error{Code: jobsapi.CodeUnavailable,
					Message: fmt.Sprintf("worker %s stopped while the call was under way: %v", w.cfg.WorkerID, err)}
			}
			if err != nil {
				code := errorCode(err)
				if code == jobsapi.CodeInternal {
					w.cfg.Log.Error().Err(err).Str("op", op).Msg("jobs: request failed")
				}
				msg := err.Error()
				var ae *jobsapi.Error
				if errors.As(err, &ae) {
					msg = ae.Message
				}
				w.reply(req, nil, nats.Header{micro.ErrorHeader: {msg}, micro.ErrorCodeHeader: {strconv.Itoa(code)}})
				return
			}
			data, err := json.Marshal(res)
			if err != nil {
				w.reply(req, nil, nats.Header{micro.ErrorHeader: {"encode answer: " + err.Error()}, micro.ErrorCodeHeader: {strconv.Itoa(jobsapi.CodeInternal)}})
				return
			}
			if limit := w.cfg.NC.MaxPayload(); int64(len(data)) > limit {
				// Publishing it would fail and leave the caller waiting for
				// its timeout; say why at once instead.
				w.reply(req, nil, nats.Header{micro.ErrorHeader: {fmt.Sprintf("the answer is %d bytes, more than the %d one NATS message carries (max_payload); ask for less", len(data), limit)},
					micro.ErrorCodeHeader: {strconv.Itoa(jobsapi.CodeConflict)}})
				return
			}
			w.reply(req, data, nil)
		}()
	}
}

// reply answers a request from the goroutine that served it. It publishes
// to the reply subject itself: micro.Request's Respond and Error record
// their outcome in the request, which micro reads once the handler has
// returned — a data race when the answer comes later from another
// goroutine. The micro error headers keep the answer the same on the wire.
func (w *Worker) reply(req micro.Request, data []byte, h nats.Header) {
	if req.Reply() == "" {
		return
	}
	msg := &nats.Msg{Subject: req.Reply(), Data: data, Header: h}
	if err := w.cfg.NC.PublishMsg(msg); err != nil {
		w.cfg.Log.Warn().Err(err).Msg("jobs: reply")
	}
}

// badRequest is an error the caller made; its text says what was wrong.
func badRequest(format string, args ...any) error {
	return &jobsapi.Error{Code: jobsapi.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// errorCode maps an error to the service's codes (HTTP statuses).
func errorCode(err error) int {
	var ae *jobsapi.Error
	var se *syntax.Error
	switch {
	case errors.As(err, &ae):
		return ae.Code
	case errors.Is(err, tasks.ErrUnknownTask), errors.Is(err, fs.ErrNotExist):
		return jobsapi.CodeNotFound
	case errors.Is(err, tasks.ErrTooManyRunning):
		return jobsapi.CodeConflict
	case errors.Is(err, tasks.ErrClosed):
		return jobsapi.CodeUnavailable
	case errors.Is(err, workspace.ErrOutsideWorkspace), errors.Is(err, workspace.ErrBinary),
		errors.Is(err, workspace.ErrNoMatch), errors.Is(err, workspace.ErrMultipleMatches),
		errors.Is(err, workspace.ErrInvalidID), errors.Is(err, events.ErrInvalidToken),
		errors.As(err, &se):
		return jobsapi.CodeBadRequest
	}
	return jobsapi.CodeInternal
}

// decode reads a request body and checks its session.
func decode[T interface{ Validate() error }](data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, badRequest("invalid JSON request: %v", err)
	}
	if err := v.Validate(); err != nil {
		return v, badRequest("%v", err)
	}
	return v, nil
}

// ensureBound binds the session to this worker if it is not bound yet
// (create-if-absent), and refuses a session bound to another worker: its
// jobs and workspace are there.
func (w *Worker) ensureBound(ctx context.Context, s jobsapi.SessionRequest) (string, error) {
	sid := sessionKey(s.Tenant, s.Session)
	w.noteLineage(sid, s.Lineage)
	w.mu.Lock()
	ok := w.bound[sid]
	w.mu.Unlock()
	if ok {
		return sid, nil
	}
	key := s.Tenant + "." + s.Session
	owner := w.cfg.WorkerID
	if _, err := w.bindKV.Create(ctx, key, []byte(owner)); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("jobs: bind session %s: %w", sid, err)
		}
		e, err := w.bindKV.Get(ctx, key)
		if err != nil {
			return "", fmt.Errorf("jobs: read binding of session %s: %w", sid, err)
		}
		owner = string(e.Value())
	}
	if owner != w.cfg.WorkerID {
		return "", jobsapi.BoundElsewhere(sid, owner, w.cfg.WorkerID)
	}
	w.mu.Lock()
	w.bound[sid] = true
	w.mu.Unlock()
	return sid, nil
}

// workspaceOf opens (once) the session's workspace.
func (w *Worker) workspaceOf(ctx context.Context, s jobsapi.SessionRequest) (*workspace.Workspace, error) {
	sid, err := w.ensureBound(ctx, s)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	ws := w.spaces[sid]
	w.mu.Unlock()
	if ws != nil {
		return ws, nil
	}
	dir, err := workspace.SessionDir(w.cfg.Root, s.Tenant, s.Session)
	if err != nil {
		return nil, err
	}
	if w.disks.on() {
		// Mounted before the workspace is opened: its os.Root must be the
		// image's directory, not the one the mount covers. Outside w.mu:
		// making an image takes tens of milliseconds, and attach has its
		// own lock (a second caller finds the disk attached).
		if _, err := w.disks.attach(w.cfg.Root, sid, dir); errors.Is(err, errUncapped) {
			w.cfg.Log.Warn().Str("session", sid).Msg("jobs: this session's workspace existed before disk caps and holds files: it stays uncapped")
		} else if err != nil {
			return nil, err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.spaces[sid]; ws != nil {
		return ws, nil
	}
	ws, err = w.cfg.Workspace.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("jobs: open workspace of %s: %w", sid, err)
	}
	w.spaces[sid] = ws
	return ws, nil
}

func (w *Worker) opList(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.SessionRequest](data)
	if err != nil {
		return nil, err
	}
	return jobsapi.ListResponse{Jobs: w.wireAll(w.mgr.List(sessionKey(r.Tenant, r.Session)))}, nil
}

func (w *Worker) opKillSession(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.SessionRequest](data)
	if err != nil {
		return nil, err
	}
	w.mcp.stopSession(sessionKey(r.Tenant, r.Session), "the session's jobs were killed (kill_session)")
	return jobsapi.ListResponse{Jobs: w.wireAll(w.mgr.KillSession(sessionKey(r.Tenant, r.Session)))}, nil
}

// jobID is a job number; checking it keeps "../x" from ever reaching a
// lookup.
var jobID = regexp.MustCompile(`^[1-9][0-9]{0,18}$`)

func checkID(id string) error {
	if !jobID.MatchString(id) {
		return badRequest("job id %q is not a job number (1, 2, 3, …)", id)
	}
	return nil
}

func (w *Worker) opGet(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.JobRequest](data)
	if err == nil {
		err = checkID(r.ID)
	}
	if err != nil {
		return nil, err
	}
	i, err := w.mgr.Get(sessionKey(r.Tenant, r.Session), r.ID)
	if err != nil {
		return nil, err
	}
	return w.wire(i), nil
}

func (w *Worker) opKill(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.JobRequest](data)
	if err == nil {
		err = checkID(r.ID)
	}
	if err != nil {
		return nil, err
	}
	i, err := w.mgr.Kill(sessionKey(r.Tenant, r.Session), r.ID)
	if err != nil {
		return nil, err
	}
	return w.wire(i), nil
}

func (w *Worker) opStatus(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.WaitRequest](data)
	if err == nil {
		err = checkID(r.ID)
	}
	if err != nil {
		return nil, err
	}
	if r.TimeoutMS < 0 {
		return nil, badRequest("timeout_ms %d is negative", r.TimeoutMS)
	}
	timeout := min(ms(r.TimeoutMS), w.cfg.MaxWait)
	i, outcome, err := w.mgr.Wait(ctx, sessionKey(r.Tenant, r.Session), r.ID, timeout)
	if err != nil {
		return nil, err
	}
	return jobsapi.WaitResponse{Job: w.wire(i), Outcome: outcome.String()}, nil
}

// maxOutputBytes caps the lines one output answer carries, well under
// NATS's default 1 MiB payload.
const maxOutputBytes = 512 << 10

func (w *Worker) opOutput(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.OutputRequest](data)
	if err == nil {
		err = checkID(r.ID)
	}
	if err != nil {
		return nil, err
	}
	if r.Offset < 0 || r.Limit < 0 || r.Tail < 0 {
		return nil, badRequest("offset, limit and tail may not be negative")
	}
	sid := sessionKey(r.Tenant, r.Session)
	i, err := w.mgr.Get(sid, r.ID)
	if err != nil {
		return nil, err
	}
	limit := r.Limit
	if limit == 0 {
		limit = jobsapi.DefaultOutputLines
	}
	limit = min(limit, 5000)
	var res jobsapi.OutputResponse
	switch {
	case r.Grep != "":
		if _, err := regexp.Compile(r.Grep); err != nil {
			return nil, badRequest("grep pattern %q: %v", r.Grep, err)
		}
		lines, matched, err := tasks.GrepLines(i.Path, r.Grep, limit)
		if err != nil {
			return nil, fmt.Errorf("jobs: grep output of %s: %w", r.ID, err)
		}
		res = jobsapi.OutputResponse{Lines: lines, Matched: matched, Total: i.Lines}
	default:
		offset := r.Offset
		if r.Tail > 0 {
			limit = min(r.Tail, 5000)
			offset = max(1, i.Lines-limit+1)
		}
		lines, total, more, err := tasks.ReadLines(i.Path, offset, limit)
		if err != nil {
			return nil, fmt.Errorf("jobs: read output of %s: %w", r.ID, err)
		}
		res = jobsapi.OutputResponse{Lines: lines, Offset: max(offset, 1), Total: total, More: more}
	}
	var cut bool
	if res.Lines, cut = capLines(res.Lines, maxOutputBytes); cut {
		res.More = true
	}
	if res.Lines == nil {
		res.Lines = []string{}
	}
	res.Job = w.wire(i)
	return res, nil
}

// capLines keeps the first lines that fit in max bytes.
func capLines(lines []string, max int) ([]string, bool) {
	n := 0
	for k, l := range lines {
		n += len(l) + 1
		if n > max {
			return lines[:k], true
		}
	}
	return lines, false
}

func (w *Worker) opChildState(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.ChildStateRequest](data)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(r.Run) == "" {
		return nil, badRequest("run is empty: name the run whose foreground commands to check")
	}
	state, jobs := w.childState(sessionKey(r.Tenant, r.Session), r.Run)
	return jobsapi.ChildStateResponse{State: state, Jobs: w.wireAll(jobs)}, nil
}

func (w *Worker) opRead(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.ReadRequest](data)
	if err != nil {
		return nil, err
	}
	ws, err := w.workspaceOf(ctx, r.SessionRequest)
	if err != nil {
		return nil, err
	}
	return fileResult(ws.Read(ctx, r.ReadRequest))
}

func (w *Worker) opWrite(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.WriteRequest](data)
	if err != nil {
		return nil, err
	}
	if err := w.checkFence(ctx, r.SessionRequest, "write of "+r.Path); err != nil {
		return nil, err
	}
	ws, err := w.workspaceOf(ctx, r.SessionRequest)
	if err != nil {
		return nil, err
	}
	res, err := ws.Write(ctx, r.WriteRequest)
	return fileResult(res, w.diskFull(err))
}

func (w *Worker) opEdit(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.EditRequest](data)
	if err != nil {
		return nil, err
	}
	if err := w.checkFence(ctx, r.SessionRequest, "edit of "+r.Path); err != nil {
		return nil, err
	}
	ws, err := w.workspaceOf(ctx, r.SessionRequest)
	if err != nil {
		return nil, err
	}
	res, err := ws.Edit(ctx, r.EditRequest)
	return fileResult(res, w.diskFull(err))
}

func (w *Worker) opGlob(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.GlobRequest](data)
	if err != nil {
		return nil, err
	}
	ws, err := w.workspaceOf(ctx, r.SessionRequest)
	if err != nil {
		return nil, err
	}
	return fileResult(ws.Glob(ctx, r.GlobRequest))
}

func (w *Worker) opGrep(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.GrepRequest](data)
	if err != nil {
		return nil, err
	}
	ws, err := w.workspaceOf(ctx, r.SessionRequest)
	if err != nil {
		return nil, err
	}
	return fileResult(ws.Grep(ctx, r.GrepRequest))
}

// fileResult maps a workspace tool's error: a missing file is 404, and the
// rest are the caller's to fix (a path outside, a directory, no match, a
// bad pattern), whose messages already say what was wrong.
func fileResult[T any](res T, err error) (any, error) {
	if err == nil {
		return res, nil
	}
	var ae *jobsapi.Error
	if errors.As(err, &ae) {
		return nil, ae
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &jobsapi.Error{Code: jobsapi.CodeNotFound, Message: err.Error()}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return nil, &jobsapi.Error{Code: jobsapi.CodeBadRequest, Message: err.Error()}
}

// semverRE is the SemVer 2.0 shape micro insists on.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// semver is v without a leading "v" when it is SemVer, else 0.0.0, so a dev
// build does not keep the service from starting; the build string goes in
// the metadata.
func semver(v string) string {
	v = strings.TrimPrefix(v, "v")
	if semverRE.MatchString(v) {
		return v
	}
	return "0.0.0"
}
