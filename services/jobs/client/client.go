// Package client is the typed Go client of the jobs service: NATS
// request/reply to jetway.jobs.<worker>.<op>, with the session's worker
// found through its binding in the jetway_workers bucket, or bound to a
// live worker (found by micro discovery) when it has none yet.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/pkg/handover"
	"jetway/pkg/workspace"
	"jetway/services/jobs/jobsapi"
)

// Defaults for zero Config fields.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultDiscoverWait = 3 * time.Second
	DefaultDiscover     = 100 * time.Millisecond
)

// Config sets up a Client; NC is required.
type Config struct {
	NC *nats.Conn
	// Timeout bounds a request that does not wait for a job (default 30s);
	// run and status calls get their own wait on top of it.
	Timeout time.Duration
	// DiscoverWait bounds the wait for the first live worker to answer the
	// micro PING when a new session is bound (default 3s); Discover is how
	// long to listen for more answers after it (default 100ms).
	DiscoverWait time.Duration
	Discover     time.Duration
	// RebindAfter is how long a bound worker must have been unreachable (no
	// responders, and absent from discovery) before its sessions move to a
	// live one (default 30s). A worker that restarts is back within
	// seconds, and a session's files are on its worker's disk: moving on
	// the first failed call would strand them for a blip.
	RebindAfter time.Duration
}

// DefaultRebindAfter is Config.RebindAfter's default.
const DefaultRebindAfter = 30 * time.Second

// Client talks to jobs workers. It is safe for concurrent use.
type Client struct {
	cfg Config
	js  jetstream.JetStream

	mu       sync.Mutex
	kv       jetstream.KeyValue
	bindings map[string]string // "<tenant>.<session>" -> worker
	live     []string          // workers found by the last discovery
	liveAt   time.Time
	gone     map[string]time.Time // worker -> when a call first found it unreachable
	discover sync.Mutex           // one discovery at a time
}

// liveTTL is how long a discovery answers for: binding a burst of new
// sessions costs one PING round, not one each.
const liveTTL = 2 * time.Second

// New returns a client on cfg.NC.
func New(cfg Config) (*Client, error) {
	if cfg.NC == nil {
		return nil, errors.New("jobs client: Config.NC is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Discover <= 0 {
		cfg.Discover = DefaultDiscover
	}
	if cfg.DiscoverWait <= 0 {
		cfg.DiscoverWait = DefaultDiscoverWait
	}
	if cfg.RebindAfter <= 0 {
		cfg.RebindAfter = DefaultRebindAfter
	}
	js, err := bus.JetStream(cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("jobs client: %w", err)
	}
	return &Client{cfg: cfg, js: js, bindings: map[string]string{}, gone: map[string]time.Time{}}, nil
}

func (c *Client) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kv != nil {
		return c.kv, nil
	}
	kv, err := bus.BindBucket(ctx, c.js, bus.BucketWorkers)
	if err != nil {
		return nil, fmt.Errorf("jobs client: bucket %s: %w", bus.BucketWorkers, err)
	}
	c.kv = kv
	return kv, nil
}

// Binding returns the worker the session is bound to, "" when it has none.
func (c *Client) Binding(ctx context.Context, tenant, session string) (string, error) {
	if err := (jobsapi.SessionRequest{Tenant: tenant, Session: session}).Validate(); err != nil {
		return "", &jobsapi.Error{Code: jobsapi.CodeBadRequest, Message: err.Error()}
	}
	key := tenant + "." + session
	c.mu.Lock()
	w := c.bindings[key]
	c.mu.Unlock()
	if w != "" {
		return w, nil
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return "", err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("jobs client: read binding of %s/%s: %w", tenant, session, err)
	}
	w = string(e.Value())
	c.mu.Lock()
	c.bindings[key] = w
	c.mu.Unlock()
	return w, nil
}

// Worker returns the worker the session is bound to, binding it to a live
// worker (chosen at random among those answering) when it has none. The
// binding is create-if-absent, so two clients binding at once agree.
func (c *Client) Worker(ctx context.Context, tenant, session string) (string, error) {
	w, err := c.Binding(ctx, tenant, session)
	if err != nil || w != "" {
		return w, err
	}
	live, err := c.liveWorkers(ctx)
	if err != nil {
		return "", err
	}
	if len(live) == 0 {
		return "", &jobsapi.Error{Code: jobsapi.CodeUnavailable, Message: "no jobs worker answers (is one running?)"}
	}
	w = live[rand.IntN(len(live))]
	kv, err := c.bucket(ctx)
	if err != nil {
		return "", err
	}
	key := tenant + "." + session
	if _, err := kv.Create(ctx, key, []byte(w)); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("jobs client: bind %s/%s: %w", tenant, session, err)
		}
		e, err := kv.Get(ctx, key)
		if err != nil {
			return "", fmt.Errorf("jobs client: read binding of %s/%s: %w", tenant, session, err)
		}
		w = string(e.Value())
	}
	c.mu.Lock()
	c.bindings[key] = w
	c.mu.Unlock()
	return w, nil
}

// liveWorkers is Workers, answered from the last discovery for liveTTL;
// one discovery runs at a time, so a burst of new sessions shares it.
func (c *Client) liveWorkers(ctx context.Context) ([]string, error) {
	c.discover.Lock()
	defer c.discover.Unlock()
	c.mu.Lock()
	live := c.live
	fresh := time.Since(c.liveAt) <= liveTTL
	c.mu.Unlock()
	if fresh && len(live) > 0 {
		return live, nil
	}
	live, err := c.Workers(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.live, c.liveAt = live, time.Now()
	c.mu.Unlock()
	return live, nil
}

// Workers lists the ids of the workers answering the micro PING of
// jetway-jobs: it waits up to Config.DiscoverWait for the first answer and
// Config.Discover more for the others.
func (c *Client) Workers(ctx context.Context) ([]string, error) {
	subject, err := micro.ControlSubject(micro.PingVerb, jobsapi.ServiceName, "")
	if err != nil {
		return nil, err
	}
	inbox := c.cfg.NC.NewRespInbox()
	sub, err := c.cfg.NC.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("jobs client: discover workers: %w", err)
	}
	// A one-off inbox: a failed unsubscribe leaves a subscription nothing
	// publishes to, gone with the connection.
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.cfg.NC.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("jobs client: discover workers: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DiscoverWait)
	defer cancel()
	seen := map[string]bool{}
	var out []string
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return out, nil
		}
		if len(out) == 0 {
			// The first answer is in: the others get a short while more.
			var more context.CancelFunc
			ctx, more = context.WithTimeout(ctx, c.cfg.Discover)
			defer more()
		}
		var p micro.Ping
		if json.Unmarshal(msg.Data, &p) != nil {
			continue
		}
		if w := p.Metadata[jobsapi.MetadataWorker]; w != "" && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
}

// request sends op's request to the session's worker and decodes the answer
// into out; wait extends the timeout for calls that wait on a job.
//
// A session bound to a worker that no longer answers (stopped for good, or
// gone with its machine) would fail every call for ever: when the bound
// worker has had no responders for Config.RebindAfter and discovery does
// not find it either, the session is rebound to a live worker and the call
// made there once.
func (c *Client) request(ctx context.Context, s jobsapi.SessionRequest, op string, wait time.Duration, in, out any) error {
	w, err := c.Worker(ctx, s.Tenant, s.Session)
	if err != nil {
		return err
	}
	err = c.requestWorker(ctx, w, op, wait, in, out)
	var je *jobsapi.Error
	if errors.As(err, &je) && (je.NoResponders || jobsapi.IsBoundElsewhere(err)) {
		// The cached binding may be stale: another client rebound the
		// session while its worker was away. Ask the one it names now.
		if moved, rerr := c.refresh(ctx, s.Tenant, s.Session, w); rerr == nil && moved != "" {
			return c.requestWorker(ctx, moved, op, wait, in, out)
		}
	}
	if !errors.As(err, &je) || !je.NoResponders {
		c.answered(w)
		return err
	}
	if !c.goneFor(w, c.cfg.RebindAfter) {
		return err // perhaps a restart: the session stays, the call fails
	}
	moved, rerr := c.rebind(ctx, s.Tenant, s.Session, w)
	if rerr != nil || moved == "" {
		return err
	}
	return c.requestWorker(ctx, moved, op, wait, in, out)
}

// goneFor notes that worker did not answer and reports whether it has not
// answered for at least d, counted from the first call that found it so.
func (c *Client) goneFor(worker string, d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	first, ok := c.gone[worker]
	if !ok {
		c.gone[worker] = time.Now()
		return false
	}
	return time.Since(first) >= d
}

// answered forgets that worker was unreachable: it answers again.
func (c *Client) answered(worker string) {
	c.mu.Lock()
	delete(c.gone, worker)
	c.mu.Unlock()
}

// rebind moves the session off dead, a worker that did not answer, to a
// live one, and says so in a headline. It returns "" when dead still
// answers discovery (a blip, not a death) or no worker is live. The move is
// a compare-and-swap on the binding: clients rebinding at once agree.
func (c *Client) rebind(ctx context.Context, tenant, session, dead string) (string, error) {
	live, err := c.Workers(ctx)
	if err != nil || len(live) == 0 || slices.Contains(live, dead) {
		return "", err
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return "", err
	}
	key := tenant + "." + session
	e, err := kv.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("jobs client: read binding of %s/%s: %w", tenant, session, err)
	}
	w := string(e.Value())
	if w == dead {
		w = live[rand.IntN(len(live))]
		if _, err := kv.Update(ctx, key, []byte(w), e.Revision()); err != nil {
			// Another client moved it first: take its choice.
			c.forget(key)
			return c.Binding(ctx, tenant, session)
		}
		c.announceRebind(ctx, tenant, session, dead, w)
	}
	c.mu.Lock()
	c.bindings[key] = w
	c.mu.Unlock()
	return w, nil
}

// refresh drops the cached binding of a session whose worker w did not
// serve a request and reads it again: the worker it names now if that is
// another, "" if the binding still names w (or none).
func (c *Client) refresh(ctx context.Context, tenant, session, w string) (string, error) {
	c.forget(tenant + "." + session)
	now, err := c.Binding(ctx, tenant, session)
	if err != nil || now == w {
		return "", err
	}
	return now, nil
}

func (c *Client) forget(key string) {
	c.mu.Lock()
	delete(c.bindings, key)
	c.mu.Unlock()
}

// announceRebind publishes the rebind headline into the session's run
// output (jetway.out.…, which the runner — this client's usual user — may
// publish on), where its stream and the chat show headlines. Its id names
// the move, so two clients announcing one move store one headline.
func (c *Client) announceRebind(ctx context.Context, tenant, session, from, to string) {
	subj, err := events.OutSubject(tenant, session)
	if err != nil {
		return
	}
	ev, err := events.New(tenant, session, "jetway/jobs-client", events.HeadlineNote{
		Text: events.JobsReboundHeadline(from, to), About: events.TypeJobsRebound,
	})
	if err != nil {
		return
	}
	ev.SetID("jetway.rebind/" + tenant + "/" + session + "/" + from + "/" + to)
	msg, err := events.Encode(ctx, subj, ev)
	if err != nil {
		return
	}
	_, _ = c.js.PublishMsg(ctx, msg)
}

func (c *Client) requestWorker(ctx context.Context, worker, op string, wait time.Duration, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("jobs client: encode %s request: %w", op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout+wait)
	defer cancel()
	msg, err := c.cfg.NC.RequestWithContext(ctx, jobsapi.Subject(worker, op), body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return &jobsapi.Error{Code: jobsapi.CodeUnavailable, Op: op, NoResponders: true,
			Message: fmt.Sprintf("worker %s does not answer (no responders)", worker)}
	case err != nil:
		return fmt.Errorf("jobs client: %s on worker %s: %w", op, worker, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		if n == 0 {
			n = jobsapi.CodeInternal
		}
		return &jobsapi.Error{Code: n, Op: op, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("jobs client: decode %s answer: %w", op, err)
	}
	return nil
}

// Start starts a background job.
func (c *Client) Start(ctx context.Context, r jobsapi.StartRequest) (jobsapi.StartResponse, error) {
	var res jobsapi.StartResponse
	err := c.request(ctx, r.SessionRequest, jobsapi.OpStart, 0, r, &res)
	return res, err
}

// Run runs a foreground command: it answers when the command ends, or at
// the timeout with the command left running as a background job.
func (c *Client) Run(ctx context.Context, r jobsapi.StartRequest) (jobsapi.StartResponse, error) {
	var res jobsapi.StartResponse
	wait := time.Duration(r.TimeoutMS) * time.Millisecond
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	err := c.request(ctx, r.SessionRequest, jobsapi.OpRun, wait, r, &res)
	return res, err
}

// HandOffWait bounds how long an interrupted RunUntil waits, after asking
// for the hand-off, for the run call's answer.
const HandOffWait = 10 * time.Second

// RunUntil is Run for a caller that may be interrupted: when ctx ends and
// handOff(context.Cause(ctx)) says so, it hands the run's foreground
// commands to the background (OpHandOff, on a context of its own) and
// reads the run call's answer, which then says what became of the command
// (HandedOff, with Ended or Backgrounded): nothing it did is lost with the
// caller's wait. Otherwise, and when the hand-off or its answer fails, it
// returns as Run does, with ctx's error. A request without a run (r.Run)
// is never handed off.
func (c *Client) RunUntil(ctx context.Context, r jobsapi.StartRequest, handOff func(cause error) bool) (jobsapi.StartResponse, error) {
	if handOff == nil || r.Run == "" {
		return c.Run(ctx, r)
	}
	// The call outlives ctx, by at most HandOffWait once ctx has ended.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	type answer struct {
		res jobsapi.StartResponse
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.Run(rctx, r)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		return a.res, a.err
	case <-ctx.Done():
	}
	if !handOff(context.Cause(ctx)) {
		return jobsapi.StartResponse{}, ctx.Err()
	}
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), HandOffWait)
	defer hcancel()
	req := jobsapi.HandOffRequest{SessionRequest: jobsapi.SessionRequest{Tenant: r.Tenant, Session: r.Session, Fence: r.Run}, Run: r.Run}
	var ho jobsapi.HandOffResponse
	if err := c.request(hctx, req.SessionRequest, jobsapi.OpHandOff, 0, req, &ho); err != nil {
		return jobsapi.StartResponse{}, fmt.Errorf("%w (the command was not handed to the background: %w)", ctx.Err(), err)
	}
	select {
	case a := <-done:
		return a.res, a.err
	case <-hctx.Done():
		return jobsapi.StartResponse{}, fmt.Errorf("%w (handed to the background, but the run call did not answer within %s)", ctx.Err(), HandOffWait)
	}
}

// Status waits up to wait for the job to end (or, for a function task, to
// report) and returns it with how the wait ended. It counts as the model
// seeing an end: that end is not published again.
func (c *Client) Status(ctx context.Context, tenant, session, id string, wait time.Duration) (jobsapi.WaitResponse, error) {
	var res jobsapi.WaitResponse
	r := jobsapi.WaitRequest{JobRequest: jobRequest(tenant, session, id), TimeoutMS: wait.Milliseconds()}
	err := c.request(ctx, r.SessionRequest, jobsapi.OpStatus, wait, r, &res)
	return res, err
}

// Output reads a job's output: lines from an offset, a grep, or the tail.
func (c *Client) Output(ctx context.Context, r jobsapi.OutputRequest) (jobsapi.OutputResponse, error) {
	var res jobsapi.OutputResponse
	err := c.request(ctx, r.SessionRequest, jobsapi.OpOutput, 0, r, &res)
	return res, err
}

// Kill ends a job's whole process tree and returns it ended.
func (c *Client) Kill(ctx context.Context, tenant, session, id string) (jobsapi.Job, error) {
	var res jobsapi.Job
	r := jobRequest(tenant, session, id)
	err := c.request(ctx, r.SessionRequest, jobsapi.OpKill, 15*time.Second, r, &res)
	return res, err
}

// Get returns a job without counting as the model seeing its end.
func (c *Client) Get(ctx context.Context, tenant, session, id string) (jobsapi.Job, error) {
	var res jobsapi.Job
	r := jobRequest(tenant, session, id)
	err := c.request(ctx, r.SessionRequest, jobsapi.OpGet, 0, r, &res)
	return res, err
}

// List returns the session's jobs in start order; a session never bound to
// a worker has none.
func (c *Client) List(ctx context.Context, tenant, session string) ([]jobsapi.Job, error) {
	return c.sessionJobs(ctx, tenant, session, jobsapi.OpList)
}

// KillSession kills the session's running jobs and returns them.
func (c *Client) KillSession(ctx context.Context, tenant, session string) ([]jobsapi.Job, error) {
	return c.sessionJobs(ctx, tenant, session, jobsapi.OpKillSession)
}

func (c *Client) sessionJobs(ctx context.Context, tenant, session, op string) ([]jobsapi.Job, error) {
	// Read afresh: a worker that lost the session to a rebind while it was
	// away answers a list of it with nothing, not with a refusal, so a
	// cached binding would show a session's jobs as none until restart.
	c.forget(tenant + "." + session)
	w, err := c.Binding(ctx, tenant, session)
	if err != nil || w == "" {
		return []jobsapi.Job{}, err
	}
	var res jobsapi.ListResponse
	err = c.requestWorker(ctx, w, op, 15*time.Second, jobsapi.SessionRequest{Tenant: tenant, Session: session}, &res)
	return res.Jobs, err
}

// ChildState answers whether run's foreground commands are gone. A session
// bound to no worker never started one (gone); a worker that does not
// answer leaves it unknown, with the error saying why.
func (c *Client) ChildState(ctx context.Context, tenant, session, run string) (handover.ChildState, error) {
	w, err := c.Binding(ctx, tenant, session)
	if err != nil {
		return handover.ChildUnknown, err
	}
	if w == "" {
		return handover.ChildGone, nil
	}
	var res jobsapi.ChildStateResponse
	r := jobsapi.ChildStateRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, Run: run}
	if err := c.requestWorker(ctx, w, jobsapi.OpChildState, 0, r, &res); err != nil {
		return handover.ChildUnknown, err
	}
	return res.State, nil
}

// Read returns lines of a workspace file or, when r.Images is set and the
// file's bytes are an image, the image whole (res.Image).
func (c *Client) Read(ctx context.Context, tenant, session string, r workspace.ReadRequest) (workspace.ReadResult, error) {
	var res workspace.ReadResult
	s := jobsapi.SessionRequest{Tenant: tenant, Session: session}
	err := c.request(ctx, s, jobsapi.OpRead, 0, jobsapi.ReadRequest{SessionRequest: s, ReadRequest: r}, &res)
	return res, err
}

// Write creates or replaces a workspace file.
func (c *Client) Write(ctx context.Context, tenant, session string, r workspace.WriteRequest) (workspace.WriteResult, error) {
	return c.WriteFor(ctx, jobsapi.SessionRequest{Tenant: tenant, Session: session}, r)
}

// WriteFor is Write asked as s says: for a run, s carries its fence.
func (c *Client) WriteFor(ctx context.Context, s jobsapi.SessionRequest, r workspace.WriteRequest) (workspace.WriteResult, error) {
	var res workspace.WriteResult
	err := c.request(ctx, s, jobsapi.OpWrite, 0, jobsapi.WriteRequest{SessionRequest: s, WriteRequest: r}, &res)
	return res, err
}

// Edit replaces exact text in a workspace file.
func (c *Client) Edit(ctx context.Context, tenant, session string, r workspace.EditRequest) (workspace.EditResult, error) {
	return c.EditFor(ctx, jobsapi.SessionRequest{Tenant: tenant, Session: session}, r)
}

// EditFor is Edit asked as s says: for a run, s carries its fence.
func (c *Client) EditFor(ctx context.Context, s jobsapi.SessionRequest, r workspace.EditRequest) (workspace.EditResult, error) {
	var res workspace.EditResult
	err := c.request(ctx, s, jobsapi.OpEdit, 0, jobsapi.EditRequest{SessionRequest: s, EditRequest: r}, &res)
	return res, err
}

// Glob lists workspace files matching a pattern.
func (c *Client) Glob(ctx context.Context, tenant, session string, r workspace.GlobRequest) (workspace.GlobResult, error) {
	var res workspace.GlobResult
	s := jobsapi.SessionRequest{Tenant: tenant, Session: session}
	err := c.request(ctx, s, jobsapi.OpGlob, 0, jobsapi.GlobRequest{SessionRequest: s, GlobRequest: r}, &res)
	return res, err
}

// Grep searches workspace files for a regular expression.
func (c *Client) Grep(ctx context.Context, tenant, session string, r workspace.GrepRequest) (workspace.GrepResult, error) {
	var res workspace.GrepResult
	s := jobsapi.SessionRequest{Tenant: tenant, Session: session}
	err := c.request(ctx, s, jobsapi.OpGrep, 0, jobsapi.GrepRequest{SessionRequest: s, GrepRequest: r}, &res)
	return res, err
}

func jobRequest(tenant, session, id string) jobsapi.JobRequest {
	return jobsapi.JobRequest{SessionRequest: jobsapi.SessionRequest{Tenant: tenant, Session: session}, ID: id}
}

// MCPOpen attaches a connection to the session's MCP stdio server,
// starting it on the session's worker when it does not run.
func (c *Client) MCPOpen(ctx context.Context, r jobsapi.MCPOpenRequest) (jobsapi.MCPOpenResponse, error) {
	var res jobsapi.MCPOpenResponse
	err := c.request(ctx, r.SessionRequest, jobsapi.OpMCPOpen, 15*time.Second, r, &res)
	return res, err
}

// MCPSend writes JSON-RPC messages to a connection's server.
func (c *Client) MCPSend(ctx context.Context, r jobsapi.MCPSendRequest) error {
	var res jobsapi.MCPEmpty
	return c.request(ctx, r.SessionRequest, jobsapi.OpMCPSend, 0, r, &res)
}

// MCPRecv waits up to r.WaitMS for the messages a connection's server
// wrote.
func (c *Client) MCPRecv(ctx context.Context, r jobsapi.MCPRecvRequest) (jobsapi.MCPRecvResponse, error) {
	var res jobsapi.MCPRecvResponse
	err := c.request(ctx, r.SessionRequest, jobsapi.OpMCPRecv, time.Duration(r.WaitMS)*time.Millisecond, r, &res)
	return res, err
}

// MCPClose detaches a connection; the server keeps running until its
// idle timeout.
func (c *Client) MCPClose(ctx context.Context, r jobsapi.MCPConnRequest) error {
	var res jobsapi.MCPEmpty
	return c.request(ctx, r.SessionRequest, jobsapi.OpMCPClose, 0, r, &res)
}

// MCPState lists the session's MCP stdio servers on its worker.
func (c *Client) MCPState(ctx context.Context, tenant, session string) ([]jobsapi.MCPServerState, error) {
	var res jobsapi.MCPStateResponse
	err := c.request(ctx, jobsapi.SessionRequest{Tenant: tenant, Session: session}, jobsapi.OpMCPState, 0, jobsapi.SessionRequest{Tenant: tenant, Session: session}, &res)
	return res.Servers, err
}

// MCPReport tells the session's worker how the session's http MCP
// servers are, for MCPState's readers (the session detail).
func (c *Client) MCPReport(ctx context.Context, r jobsapi.MCPReportRequest) error {
	var res jobsapi.MCPEmpty
	return c.request(ctx, r.SessionRequest, jobsapi.OpMCPReport, 0, r, &res)
}

// Unreachable reports whether err says the worker could not be asked —
// no responders, stopping, or no answer in time — rather than that it
// answered: the question may be asked again later with hope of an answer.
func Unreachable(err error) bool {
	return errors.Is(err, jobsapi.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
