package jobs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	"jetway/pkg/control/groundstop"
	"jetway/pkg/redact"
	"jetway/pkg/tasks/proctree"
	"jetway/services/jobs/jobsapi"
)

// This file hosts the sessions' MCP stdio servers (see jobsapi/mcp.go for
// the wire): one process tree per session and server, started by the
// first open, confined and contained as the session's jobs are, its
// environment built from the profile's env and named secrets only. A
// server that crashes starts again at the next open, after a backoff that
// doubles with each crash in a row; one no connection used for the idle
// timeout is stopped, and so are a session's servers on its Ground Stop
// or kill_session. The worker's own proctree host holds them, so none
// outlives the worker.

// MCP server defaults.
const (
	DefaultMCPIdle = 10 * time.Minute
	mcpBackoffMin  = 500 * time.Millisecond
	mcpBackoffMax  = 30 * time.Second
	mcpStableAfter = time.Minute // a server up this long starts its backoff over
	mcpMaxLine     = 8 << 20     // the longest message a server may write
	mcpMaxOpenWait = 10 * time.Second
	mcpStderrLines = 5
)

// mcpHost holds a worker's MCP servers.
type mcpHost struct {
	w    *Worker
	host *proctree.Host
	idle time.Duration

	mu       sync.Mutex
	servers  map[string]*mcpServer // by sid + "\x00" + name
	seq      int
	reported map[string][]jobsapi.MCPServerState // http servers' states by sid, as runners report them
	packages *mcpPackages                        // the tenants' npx packages
}

// mcpServer is one session's server: its process (when running) and its
// one connection.
type mcpServer struct {
	sid, name string

	mu       sync.Mutex
	spec     jobsapi.MCPServer
	state    string
	err      string
	tree     *proctree.Tree
	stdin    *os.File
	gen      int
	conn     *mcpConn
	initRes  json.RawMessage // the result of the process's initialize
	initID   string          // the id of that initialize, until answered
	restarts int
	crashes  int // in a row
	started  time.Time
	notBefre time.Time
	lastUse  time.Time
	polling  int // receives waiting now: a connection in use is never idle
	stderr   []string
	exited   chan struct{} // closed once the process's end is noted
	writeMu  sync.Mutex
}

// mcpConn is a runner's connection to a server.
type mcpConn struct {
	id      string
	queue   []json.RawMessage
	wake    chan struct{} // closed and replaced when queue or closed change
	closed  bool
	reason  string
	dropIni bool // the worker answered its initialize: drop its initialized
	// pending are the ids of the requests this connection sent and the
	// server has not answered: an answer to another (one taken over before
	// its answer came) would meet a request of this one with the same id.
	pending map[string]bool
}

func newMCPHost(w *Worker) (*mcpHost, error) {
	h, err := proctree.NewHost(proctree.Config{Grace: w.cfg.Grace, NoCgroups: w.cfg.NoCgroups, Log: w.cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("jobs: mcp servers: %w", err)
	}
	idle := w.cfg.MCPIdle
	if idle <= 0 {
		idle = DefaultMCPIdle
	}
	m := &mcpHost{w: w, host: h, idle: idle, servers: map[string]*mcpServer{}, reported: map[string][]jobsapi.MCPServerState{}}
	m.packages = &mcpPackages{m: m, installs: map[string]*packageInstall{}}
	return m, nil
}

// run stops idle servers until ctx is done, then every server.
func (m *mcpHost) run(ctx context.Context) {
	tick := time.NewTicker(max(m.idle/4, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.stopAll("the jobs worker stopped")
			m.host.Close()
			return
		case <-tick.C:
			m.stopIdle()
		}
	}
}

func (m *mcpHost) all() []*mcpServer {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*mcpServer, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s)
	}
	return out
}

func (m *mcpHost) stopIdle() {
	for _, s := range m.all() {
		s.mu.Lock()
		idle := s.tree != nil && s.polling == 0 && time.Since(s.lastUse) > m.idle
		s.mu.Unlock()
		if idle {
			s.stop(fmt.Sprintf("idle for %s", m.idle))
		}
	}
}

func (m *mcpHost) stopAll(reason string) {
	for _, s := range m.all() {
		s.stop(reason)
	}
}

// stopSession stops the session's servers (kill_session, Ground Stop).
func (m *mcpHost) stopSession(sid, reason string) {
	for _, s := range m.all() {
		if s.sid == sid {
			s.stop(reason)
		}
	}
}

func (m *mcpHost) server(sid, name string, create bool) *mcpServer {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := sid + "\x00" + name
	s := m.servers[key]
	if s == nil && create {
		s = &mcpServer{sid: sid, name: name, state: "stopped"}
		m.servers[key] = s
	}
	return s
}

func (m *mcpHost) connID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	return fmt.Sprintf("c%d-%s", m.seq, randHex(4))
}

// open attaches a new connection, starting the server when it does not
// run (after its backoff when it crashed).
func (m *mcpHost) open(ctx context.Context, r jobsapi.MCPOpenRequest) (jobsapi.MCPOpenResponse, error) {
	w := m.w
	if w.conf.base == nil && !w.cfg.AllowUnconfined {
		return jobsapi.MCPOpenResponse{}, w.errUnconfined()
	}
	if err := w.refuseGrounded(r.SessionRequest, "its MCP servers do not start"); err != nil {
		return jobsapi.MCPOpenResponse{}, err
	}
	if err := checkNetwork(r.Server.Network); err != nil {
		return jobsapi.MCPOpenResponse{}, m.failed(r, err)
	}
	env, err := m.serverEnv(r.Tenant, r.Server)
	if err != nil {
		return jobsapi.MCPOpenResponse{}, m.failed(r, err)
	}
	launch, pkgDir, err := m.launch(ctx, r)
	if err != nil {
		return jobsapi.MCPOpenResponse{}, err
	}
	ws, err := w.workspaceOf(ctx, r.SessionRequest)
	if err != nil {
		return jobsapi.MCPOpenResponse{}, err
	}
	tmp, err := w.tmpDir(r.Tenant, r.Session)
	if err != nil {
		return jobsapi.MCPOpenResponse{}, err
	}
	s := m.server(sessionKey(r.Tenant, r.Session), r.Server.Name, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tree != nil && !sameServer(s.spec, r.Server) {
		s.stopLocked("the profile changed the server")
	}
	if s.tree == nil {
		if wait := time.Until(s.notBefre); wait > 0 {
			if wait > mcpMaxOpenWait {
				return jobsapi.MCPOpenResponse{}, &jobsapi.Error{Code: jobsapi.CodeUnavailable,
					Message: fmt.Sprintf("MCP server %s crashed %d times in a row (%s); it starts again in %s", s.name, s.crashes, s.err, wait.Round(time.Second))}
			}
			s.mu.Unlock()
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				s.mu.Lock()
				return jobsapi.MCPOpenResponse{}, ctx.Err()
			}
			s.mu.Lock()
		}
		if s.tree == nil {
			conf := serverConfinement(w.jobConfinement(ws.Dir(), tmp, r.Server.Network), pkgDir)
			if why := notPermitted(conf, launch, workerPath(), ws.Dir()); why != "" {
				s.state, s.err = "failed", why
				return jobsapi.MCPOpenResponse{}, badRequest("MCP server %s cannot start: %s", s.name, why)
			}
			if err := m.start(s, r.Server, launch, ws.Dir(), tmp, env, conf); err != nil {
				return jobsapi.MCPOpenResponse{}, err
			}
		}
	}
	if s.conn != nil {
		s.conn.close("another connection took the server over (the session's next run)")
	}
	s.conn = &mcpConn{id: m.connID(), wake: make(chan struct{}), pending: map[string]bool{}}
	s.lastUse = time.Now()
	return jobsapi.MCPOpenResponse{Conn: s.conn.id, Restarts: s.restarts}, nil
}

// launch is how r's server is started: as the profile says, or for an npx
// server from the tenant's install of its package (mcppackages.go), whose
// directory it returns. While the install is under way the server is
// "starting", and one that fails leaves it failed with npm's words.
func (m *mcpHost) launch(ctx context.Context, r jobsapi.MCPOpenRequest) (jobsapi.MCPServer, string, error) {
	if _, _, _, ok := npxPackage(r.Server.Command, r.Server.Args); !ok {
		return r.Server, "", nil
	}
	m.note(r, "starting", "installing its package for the tenant")
	// An open answers within mcpMaxOpenWait, as for a backoff: a longer
	// install says so, and the caller asks again.
	wctx, cancel := context.WithTimeout(ctx, mcpMaxOpenWait)
	defer cancel()
	launch, dir, err := m.packages.resolve(wctx, r.Tenant, r.Server)
	if err != nil && wctx.Err() != nil {
		m.note(r, "starting", err.Error())
		return launch, "", &jobsapi.Error{Code: jobsapi.CodeNotYet, Message: fmt.Sprintf("MCP server %s: %v", r.Server.Name, err)}
	}
	if err != nil {
		return launch, "", m.failed(r, &jobsapi.Error{Code: jobsapi.CodeUnavailable, Message: fmt.Sprintf("MCP server %s: %v", r.Server.Name, err)})
	}
	return launch, dir, nil
}

// serverConfinement is a server's confinement: a job's, with its
// package's directory (if any) read-only.
func serverConfinement(c *proctree.Confinement, pkgDir string) *proctree.Confinement {
	if c == nil || pkgDir == "" {
		return c
	}
	c.ReadOnlyDirs = append(slices.Clip(c.ReadOnlyDirs), pkgDir)
	return c
}

// failed notes why a server could not start before its process was
// started (its environment, its network), so the session detail says it
// until the next attempt; a running server (of the profile before) is
// left as it is. It returns err.
func (m *mcpHost) failed(r jobsapi.MCPOpenRequest, err error) error {
	m.note(r, "failed", errText(err))
	return err
}

// note sets the state of r's server unless it runs.
func (m *mcpHost) note(r jobsapi.MCPOpenRequest, state, why string) {
	s := m.server(sessionKey(r.Tenant, r.Session), r.Server.Name, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tree == nil {
		s.state, s.err = state, redact.Text(why)
	}
}

// errText is an error's words without the wire's code.
func errText(err error) string {
	var je *jobsapi.Error
	if errors.As(err, &je) {
		return je.Message
	}
	return err.Error()
}

// workerPath is the PATH a server's bare command name is looked up on,
// and the one the server gets.
func workerPath() string {
	if path := os.Getenv("PATH"); path != "" {
		return path
	}
	return "/usr/local/bin:/usr/bin:/bin"
}

func sameServer(a, b jobsapi.MCPServer) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// serverEnv is a server's environment past what the worker sets: the
// profile's plain variables and its secrets, each read from the one
// variable of the session's tenant (or the operator's shared one) that
// agents.ResolveMCPSecret names. Nothing else of the worker's environment
// is passed on.
func (m *mcpHost) serverEnv(tenant string, spec jobsapi.MCPServer) ([]string, error) {
	var env []string
	for _, name := range slices.Sorted(maps.Keys(spec.Env)) {
		if why := agents.ForbiddenMCPEnv(name); why != "" {
			return nil, badRequest("MCP server %s: env %s: %s", spec.Name, name, why)
		}
		env = append(env, name+"="+spec.Env[name])
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Secrets)) {
		if why := agents.ForbiddenMCPEnv(name); why != "" {
			return nil, badRequest("MCP server %s: secrets %s: %s", spec.Name, name, why)
		}
		v, err := agents.ResolveMCPSecret(m.w.cfg.SecretEnv, tenant, spec.Secrets[name], "jobs worker "+m.w.cfg.WorkerID)
		if err != nil {
			return nil, badRequest("MCP server %s: secrets %s: %v", spec.Name, name, err)
		}
		env = append(env, name+"="+v)
	}
	return env, nil
}

// start starts s's process in the workspace, confined by conf and
// contained: launch's command and arguments (spec's, or those of its npx
// package's install). s.mu is held.
func (m *mcpHost) start(s *mcpServer, spec, launch jobsapi.MCPServer, ws, tmp string, extra []string, conf *proctree.Confinement) error {
	w := m.w
	path := workerPath()
	// A bare name is looked up on the worker's PATH, which is the one the
	// server gets too.
	cmd := exec.Command(launch.Command, launch.Args...)
	cmd.Dir = ws
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + ws, "TMPDIR=" + tmp, "LANG=C.UTF-8"}, passedEnv()...)
	cmd.Env = append(cmd.Env, extra...)
	cmd.Env = append(cmd.Env, WorkerEnv+"="+w.marker())
	inR, inW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("jobs: mcp server %s: %w", spec.Name, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = inR.Close()
		_ = inW.Close()
		return fmt.Errorf("jobs: mcp server %s: %w", spec.Name, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			_ = f.Close()
		}
		return fmt.Errorf("jobs: mcp server %s: %w", spec.Name, err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	tree, err := m.host.StartConfined(cmd, w.cfg.Limits.Tree, conf)
	for _, f := range []*os.File{inR, outW, errW} {
		_ = f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{inW, outR, errR} {
			_ = f.Close()
		}
		s.state, s.err = "failed", err.Error()
		s.crashes++
		s.notBefre = time.Now().Add(backoff(s.crashes))
		return &jobsapi.Error{Code: jobsapi.CodeBadRequest, Message: fmt.Sprintf("MCP server %s did not start: %v", spec.Name, err)}
	}
	s.gen++
	if s.tree != nil || s.state == "restarting" {
		s.restarts++
	}
	s.spec, s.tree, s.stdin, s.state, s.err = spec, tree, inW, "running", ""
	s.initRes, s.initID, s.stderr = nil, "", nil
	s.started = time.Now()
	gen := s.gen
	errDone, exited := make(chan struct{}), make(chan struct{})
	s.exited = exited
	go s.readStdout(outR, gen)
	go func() { defer close(errDone); s.readStderr(errR) }()
	go func() { defer close(exited); s.wait(tree, gen, errDone) }()
	w.cfg.Log.Info().Str("session", s.sid).Str("server", s.name).Int("pid", tree.Pid()).Msg("jobs: MCP server started")
	return nil
}

// backoff is how long a server that crashed crashes times in a row waits
// before it starts again: 0.5 s, doubling, at most 30 s.
func backoff(crashes int) time.Duration {
	d := mcpBackoffMin
	for i := 1; i < crashes && d < mcpBackoffMax; i++ {
		d *= 2
	}
	return min(d, mcpBackoffMax)
}

// readStdout hands each line the server writes to the connection, and
// keeps the result of the process's initialize for later connections.
func (s *mcpServer) readStdout(f *os.File, gen int) {
	defer func() { _ = f.Close() }() // a pipe's read end: nothing to lose
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), mcpMaxLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || !json.Valid(line) {
			continue
		}
		msg := json.RawMessage(bytes.Clone(line))
		s.mu.Lock()
		if s.gen != gen {
			s.mu.Unlock()
			return
		}
		if s.initID != "" {
			var r struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal(msg, &r) == nil && string(r.ID) == s.initID && len(r.Result) > 0 {
				s.initRes, s.initID = r.Result, ""
			}
		}
		if s.conn != nil && s.conn.owns(msg) {
			s.conn.push(msg)
		}
		s.mu.Unlock()
	}
}

// readStderr keeps the last lines the server wrote to stderr, redacted,
// for the error a crash reports.
func (s *mcpServer) readStderr(f *os.File) {
	defer func() { _ = f.Close() }() // a pipe's read end: nothing to lose
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		line := redact.Text(strings.TrimSpace(sc.Text()))
		if line == "" {
			continue
		}
		s.mu.Lock()
		s.stderr = append(s.stderr, line)
		if len(s.stderr) > mcpStderrLines {
			s.stderr = s.stderr[len(s.stderr)-mcpStderrLines:]
		}
		s.mu.Unlock()
	}
}

// wait notes the process's end: a crash (an end the worker did not ask
// for) makes the server "restarting" with its backoff.
func (s *mcpServer) wait(tree *proctree.Tree, gen int, stderrDone <-chan struct{}) {
	err := tree.Wait()
	tree.Close()
	select {
	case <-stderrDone: // its last words are in
	case <-time.After(time.Second):
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen || s.tree != tree {
		return // stopped on purpose: stop said why
	}
	how := "exited"
	if err != nil {
		how = err.Error()
	}
	if hit := tree.LimitHit(); hit != "" {
		how += " (" + hit + ")"
	}
	if len(s.stderr) > 0 {
		how += "; its last words: " + strings.Join(s.stderr, " | ")
	}
	if time.Since(s.started) > mcpStableAfter {
		s.crashes = 0
	}
	s.crashes++
	s.tree, s.state, s.err = nil, "restarting", "crashed ("+how+")"
	if s.initRes == nil {
		s.state, s.err = "failed", failedStart(how, s.stderr)
	}
	_ = s.stdin.Close()
	s.notBefre = time.Now().Add(backoff(s.crashes))
	if s.conn != nil {
		s.conn.close(s.endReason())
		s.conn = nil
	}
}

// endReason says why the server's connections ended, from its state.
// s.mu is held.
func (s *mcpServer) endReason() string {
	switch s.state {
	case "stopped":
		return fmt.Sprintf("MCP server %s was stopped: %s", s.name, s.err)
	case "restarting":
		return fmt.Sprintf("MCP server %s %s; it is started again at the next call", s.name, s.err)
	case "failed":
		return fmt.Sprintf("MCP server %s %s; it is tried again at the next call", s.name, s.err)
	}
	return fmt.Sprintf("MCP server %s: another connection took the server over", s.name)
}

// stop ends the server's process and its connection, saying why.
func (s *mcpServer) stop(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(reason)
}

func (s *mcpServer) stopLocked(reason string) {
	tree := s.tree
	if tree == nil && s.conn == nil {
		if s.state != "restarting" {
			s.state, s.err = "stopped", reason
		}
		return
	}
	s.tree, s.state, s.err = nil, "stopped", reason
	s.gen++
	s.crashes, s.notBefre = 0, time.Time{}
	if s.stdin != nil {
		_ = s.stdin.Close()
	}
	if s.conn != nil {
		s.conn.close(s.endReason())
		s.conn = nil
	}
	if tree != nil {
		go func() {
			_ = tree.KillNow()
			_ = tree.Wait()
			tree.Close()
		}()
	}
}

// owns reports whether msg, a line the server wrote, is for c: a request
// or notification of the server's, or the answer to a request c sent.
func (c *mcpConn) owns(msg json.RawMessage) bool {
	var head struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(msg, &head) != nil || head.Method != "" || len(head.ID) == 0 {
		return true
	}
	if !c.pending[string(head.ID)] {
		return false
	}
	delete(c.pending, string(head.ID))
	return true
}

func (c *mcpConn) push(msg json.RawMessage) {
	c.queue = append(c.queue, msg)
	c.signal()
}

func (c *mcpConn) close(reason string) {
	if c.closed {
		return
	}
	c.closed, c.reason = true, reason
	c.signal()
}

func (c *mcpConn) signal() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// connOf finds the server and checks the connection is its current one.
func (m *mcpHost) connOf(r jobsapi.MCPConnRequest) (*mcpServer, error) {
	s := m.server(sessionKey(r.Tenant, r.Session), r.Server, false)
	if s == nil {
		return nil, &jobsapi.Error{Code: jobsapi.CodeNotFound, Message: fmt.Sprintf("session %s/%s has no MCP server %s on this worker", r.Tenant, r.Session, r.Server)}
	}
	return s, nil
}

func (m *mcpHost) send(r jobsapi.MCPSendRequest) error {
	s, err := m.connOf(r.MCPConnRequest)
	if err != nil {
		return err
	}
	s.mu.Lock()
	c := s.conn
	if c == nil || c.id != r.Conn {
		s.mu.Unlock()
		return &jobsapi.Error{Code: jobsapi.CodeConflict, Message: fmt.Sprintf("connection %s is closed: %s", r.Conn, s.endReason())}
	}
	s.lastUse = time.Now()
	var lines [][]byte
	for _, msg := range r.Messages {
		var head struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal(msg, &head); err != nil {
			s.mu.Unlock()
			return badRequest("MCP message is not a JSON object: %v", err)
		}
		switch {
		case head.Method == "initialize" && s.initRes != nil:
			// An MCP server is initialized once per process: answer a later
			// connection's initialize with the process's first result.
			resp, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": head.ID, "result": s.initRes})
			c.push(resp)
			c.dropIni = true
			continue
		case head.Method == "notifications/initialized" && c.dropIni:
			c.dropIni = false
			continue
		case head.Method == "initialize":
			s.initID = string(head.ID)
		}
		if head.Method != "" && len(head.ID) > 0 && string(head.ID) != "null" {
			c.pending[string(head.ID)] = true
		}
		lines = append(lines, append(bytes.Clone(compact(msg)), '\n'))
	}
	stdin, exited := s.stdin, s.exited
	s.mu.Unlock()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for _, l := range lines {
		if _, err := stdin.Write(l); err != nil {
			return s.writeFailed(r.Server, exited, err)
		}
	}
	return nil
}

// writeFailed is the error of a write to a server's stdin that failed:
// the server ended, and why it ended (its last words) says more than the
// broken pipe, so it waits briefly for the end to be noted.
func (s *mcpServer) writeFailed(name string, exited <-chan struct{}, err error) error {
	select {
	case <-exited:
		s.mu.Lock()
		defer s.mu.Unlock()
		return &jobsapi.Error{Code: jobsapi.CodeConflict, Message: s.endReason()}
	case <-time.After(2 * time.Second):
		return &jobsapi.Error{Code: jobsapi.CodeConflict, Message: fmt.Sprintf("MCP server %s: write to its stdin: %v", name, err)}
	}
}

// compact puts a message on one line, as the stdio transport needs.
func compact(msg json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, msg) != nil {
		return msg
	}
	return b.Bytes()
}

func (m *mcpHost) recv(ctx context.Context, r jobsapi.MCPRecvRequest) (jobsapi.MCPRecvResponse, error) {
	s, err := m.connOf(r.MCPConnRequest)
	if err != nil {
		return jobsapi.MCPRecvResponse{}, err
	}
	wait := time.Duration(min(max(r.WaitMS, 0), jobsapi.MCPMaxRecvWaitMS)) * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	limit := int(m.w.cfg.NC.MaxPayload()) - 1024
	s.mu.Lock()
	c := s.conn
	if c == nil || c.id != r.Conn {
		defer s.mu.Unlock()
		return jobsapi.MCPRecvResponse{Closed: true, Reason: s.endReason()}, nil
	}
	s.polling++
	defer func() {
		s.mu.Lock()
		s.polling--
		s.lastUse = time.Now()
		s.mu.Unlock()
	}()
	for {
		s.lastUse = time.Now()
		if len(c.queue) > 0 || c.closed {
			res := jobsapi.MCPRecvResponse{}
			size := 0
			for len(c.queue) > 0 && (len(res.Messages) == 0 || size+len(c.queue[0]) < limit) {
				size += len(c.queue[0])
				res.Messages = append(res.Messages, c.queue[0])
				c.queue = c.queue[1:]
			}
			if len(c.queue) == 0 && c.closed {
				res.Closed, res.Reason = true, c.reason
			}
			s.mu.Unlock()
			return res, nil
		}
		wake := c.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			return jobsapi.MCPRecvResponse{}, nil
		case <-ctx.Done():
			return jobsapi.MCPRecvResponse{Closed: true, Reason: "the jobs worker stopped"}, nil
		}
		s.mu.Lock()
	}
}

func (m *mcpHost) closeConn(r jobsapi.MCPConnRequest) {
	s := m.server(sessionKey(r.Tenant, r.Session), r.Server, false)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.id == r.Conn {
		s.conn.close("closed by the runner")
		s.conn = nil
		s.lastUse = time.Now()
	}
}

func (m *mcpHost) states(sid string) []jobsapi.MCPServerState {
	out := []jobsapi.MCPServerState{}
	for _, s := range m.all() {
		if s.sid != sid {
			continue
		}
		s.mu.Lock()
		st := jobsapi.MCPServerState{Server: s.name, Transport: "stdio", State: s.state, Error: s.err, Restarts: s.restarts}
		if s.tree != nil {
			st.Pid = s.tree.Pid()
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	m.mu.Lock()
	out = append(out, m.reported[sid]...)
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b jobsapi.MCPServerState) int { return strings.Compare(a.Server, b.Server) })
	return out
}

// report keeps a runner's report of a session's http servers (the latest
// replaces the one before).
func (m *mcpHost) report(sid string, servers []jobsapi.MCPServerState) {
	var keep []jobsapi.MCPServerState
	for _, s := range servers {
		if s.Transport == "http" && mcpServerName.MatchString(s.Server) {
			s.Error = redact.Text(s.Error)
			keep = append(keep, s)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(keep) == 0 {
		delete(m.reported, sid)
		return
	}
	m.reported[sid] = keep
}

var mcpServerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// The MCP ops of the service.

func (w *Worker) opMCPOpen(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.MCPOpenRequest](data)
	if err != nil {
		return nil, err
	}
	if err := w.checkFence(ctx, r.SessionRequest, "MCP server "+r.Server.Name); err != nil {
		return nil, err
	}
	return w.mcp.open(ctx, r)
}

func (w *Worker) opMCPSend(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.MCPSendRequest](data)
	if err != nil {
		return nil, err
	}
	if err := w.checkFence(ctx, r.SessionRequest, "a call to MCP server "+r.Server); err != nil {
		return nil, err
	}
	return jobsapi.MCPEmpty{}, w.mcp.send(r)
}

func (w *Worker) opMCPRecv(ctx context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.MCPRecvRequest](data)
	if err != nil {
		return nil, err
	}
	return w.mcp.recv(ctx, r)
}

func (w *Worker) opMCPClose(_ context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.MCPConnRequest](data)
	if err != nil {
		return nil, err
	}
	w.mcp.closeConn(r)
	return jobsapi.MCPEmpty{}, nil
}

func (w *Worker) opMCPReport(_ context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.MCPReportRequest](data)
	if err != nil {
		return nil, err
	}
	if len(r.Servers) > 64 {
		return nil, badRequest("at most 64 servers")
	}
	w.mcp.report(sessionKey(r.Tenant, r.Session), r.Servers)
	return jobsapi.MCPEmpty{}, nil
}

func (w *Worker) opMCPState(_ context.Context, data []byte) (any, error) {
	r, err := decode[jobsapi.SessionRequest](data)
	if err != nil {
		return nil, err
	}
	return jobsapi.MCPStateResponse{Servers: w.mcp.states(sessionKey(r.Tenant, r.Session))}, nil
}

// startMCP starts the MCP server host and the Ground Stop mirror that
// kills the commands and stops the servers of the sessions a switch covers
// (groundstop.go). The returned channel is closed once every server is
// stopped, after ctx ends.
func (w *Worker) startMCP(ctx context.Context) (<-chan struct{}, error) {
	m, err := newMCPHost(w)
	if err != nil {
		return nil, err
	}
	w.mcp = m
	if control, err := bus.OpenBucket(ctx, w.js, bus.BucketControl); err != nil {
		w.cfg.Log.Warn().Err(err).Msg("jobs: cannot read Ground Stop: commands and MCP servers are not stopped by it")
	} else {
		w.stops = groundstop.StartMirror(ctx, control, w.cfg.Log, w.onStop)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx) }()
	return done, nil
}
