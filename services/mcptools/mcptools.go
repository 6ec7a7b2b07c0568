// Package mcptools offers a run's model the tools of the MCP servers its
// agent profile names, as mcp__<server>__<tool>. It is the runner's side
// of MCP, built on the official SDK (github.com/modelcontextprotocol/go-sdk):
// an http server is reached from the runner over the streamable HTTP
// transport, with its headers' secrets read from the runner's
// configuration; a stdio server runs in the session's jobs worker, and
// its JSON-RPC messages travel over NATS (workerTransport, and the
// mcp_* operations of package jobsapi).
//
// A server's tools are discovered at the run's start and again whenever
// it says its list changed (notifications/tools/list_changed). A tool
// call's failure — an error result, a timeout, a server that crashed or
// cannot be reached — is a tool error the model reads; a server whose
// connection ended is connected again at the next call. A server's
// question to the person behind the client (elicitation) becomes a
// question approval of the session (elicit.go).
package mcptools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/egress"
	"jetway/pkg/llm"
	"jetway/pkg/redact"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

// DefaultConnectTimeout bounds connecting to a server and listing its
// tools.
const DefaultConnectTimeout = 15 * time.Second

// Config configures a Hub.
type Config struct {
	// Jobs reaches the sessions' jobs workers, which run stdio servers;
	// nil refuses stdio servers.
	Jobs *jobsclient.Client
	// SecretEnv is the environment the secrets http servers' headers name
	// are read from (nil: the runner's own). Only the source is
	// configurable: which variable a tenant's secret name reads is
	// agents.ResolveMCPSecret's alone, so no configuration can let one
	// tenant's name reach another's variable.
	SecretEnv func(variable string) (string, bool)
	// HTTPClient makes the requests to http servers. The default has no
	// timeout of its own (each call has its server's), no proxy, follows
	// no redirect, and refuses loopback, link-local, private and other
	// internal addresses unless AllowHosts names the host: a tenant's URL
	// must not reach into the operator's network through a runner.
	HTTPClient *http.Client
	// AllowHosts are the host names (or IPs, as URLs write them) an http
	// server may have on an internal address (--mcp-allow-host).
	AllowHosts []string
	// ConnectTimeout bounds connecting and listing tools (default
	// DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// ProtocolVersion is the MCP version the client asks for ("": the
	// SDK's latest, which falls back to an older handshake by itself for
	// servers that do not know it).
	ProtocolVersion string
	Log             zerolog.Logger
}

// Hub connects runs to their MCP servers.
type Hub struct{ cfg Config }

// New returns a Hub.
func New(cfg Config) *Hub {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = guardedClient(cfg.AllowHosts)
	}
	if unread := agents.UnreadMCPSecretVars(os.Environ()); cfg.SecretEnv == nil && len(unread) > 0 {
		cfg.Log.Warn().Strs("variables", unread).Msg("mcp: " + agents.UnreadMCPSecretWarning(unread))
	}
	return &Hub{cfg: cfg}
}

// Ref names the run a Set serves.
type Ref struct {
	Tenant, Session, Run string
	// Lineage is a sub-agent's ancestors, root first: the worker stops
	// its servers on an ancestor's Ground Stop.
	Lineage []string
	// Network is the network mode of the run's agent profile, which its
	// stdio servers get (jobsapi.MCPServer.Network).
	Network string
	// Ask puts a server's elicitation to a person (elicit.go); nil: the
	// client does not declare elicitation, and servers ask nobody.
	Ask rec.Asker
}

// Target receives a server's tools, at the start and after each change of
// its list: the run offers exactly these tools of the server from then on.
type Target func(server string, tools []tool.Tool)

// Set is the MCP servers of one run.
type Set struct {
	ctx     context.Context // the run's: its end ends the servers' questions
	hub     *Hub
	ref     Ref
	servers []*server
	opened  atomic.Bool
}

// Open connects to every server of the profile (in parallel, each
// bounded by the connect timeout) and hands their tools to target. A
// server that cannot be reached offers no tools in this run; States says
// why.
func (h *Hub) Open(ctx context.Context, ref Ref, specs []agents.MCPServer, target Target) *Set {
	set := &Set{ctx: ctx, hub: h, ref: ref}
	var wg sync.WaitGroup
	for _, spec := range specs {
		s := &server{hub: h, set: set, ref: ref, spec: spec, target: target, state: "starting",
			log: h.cfg.Log.With().Str("tenant", ref.Tenant).Str("session", ref.Session).Str("mcp_server", spec.Name).Logger()}
		set.servers = append(set.servers, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.connect(ctx); err != nil {
				s.log.Warn().Err(err).Msg("mcp: server not reached; its tools are not offered")
			}
		}()
	}
	wg.Wait()
	set.opened.Store(true)
	set.report()
	return set
}

// report tells the session's jobs worker how the http servers are, so
// the session detail can show them beside the stdio servers the worker
// runs itself. It does not wait: a report that gets lost is replaced by
// the next.
func (s *Set) report() {
	if s.hub.cfg.Jobs == nil {
		return
	}
	var http []jobsapi.MCPServerState
	for _, st := range s.States() {
		if st.Transport == agents.MCPHTTP {
			http = append(http, jobsapi.MCPServerState{Server: st.Server, Transport: st.Transport, State: st.State, Error: st.Error})
		}
	}
	if len(http) == 0 {
		return
	}
	req := jobsapi.MCPReportRequest{SessionRequest: jobsapi.SessionRequest{Tenant: s.ref.Tenant, Session: s.ref.Session}, Servers: http}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := s.hub.cfg.Jobs.MCPReport(ctx, req); err != nil {
			s.hub.cfg.Log.Debug().Err(err).Msg("mcp: report the http servers' states")
		}
	}()
}

// Close ends the run's connections; stdio servers go on running in the
// worker until their idle timeout.
func (s *Set) Close() {
	if s == nil {
		return
	}
	for _, srv := range s.servers {
		srv.close()
	}
	s.report()
}

// States says how each server is.
func (s *Set) States() []agents.MCPServerState {
	if s == nil {
		return nil
	}
	out := make([]agents.MCPServerState, 0, len(s.servers))
	for _, srv := range s.servers {
		srv.mu.Lock()
		out = append(out, agents.MCPServerState{Server: srv.spec.Name, Transport: agents.MCPTransport(srv.spec), State: srv.state, Error: srv.err})
		srv.mu.Unlock()
	}
	return out
}

// Unavailable are the servers that are not running as the run ends —
// failed, restarting after a crash, stopped — with why: what the run's
// end records in the session's history.
func (s *Set) Unavailable() []agents.MCPServerState {
	var out []agents.MCPServerState
	for _, st := range s.States() {
		if st.State != "running" {
			out = append(out, st)
		}
	}
	return out
}

// End ends the run's connections (Close) and says which servers were
// unavailable at the end (Unavailable).
func (s *Set) End() []agents.MCPServerState {
	if s == nil {
		return nil
	}
	out := s.Unavailable()
	s.Close()
	return out
}

// server is one MCP server of a run.
type server struct {
	hub    *Hub
	set    *Set
	ref    Ref
	spec   agents.MCPServer
	target Target
	log    zerolog.Logger

	connMu sync.Mutex // held while a session is looked up or made
	// listMu makes listings take turns, so the one offered last is the
	// one the server gave last.
	listMu   sync.Mutex
	mu       sync.Mutex
	cs       *mcp.ClientSession
	conn     *workerConn // the stdio connection under cs, for why it ended
	state    string
	err      string
	closed   bool
	changes  int // announcements heard (list_changed, a new connection)
	listed   int // changes as of the start of the listing offered last
	connects int
	asks     atomic.Int32 // questions of the server a person is asked now
}

// connect opens a session with the server and offers its tools.
func (s *server) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.hub.cfg.ConnectTimeout)
	defer cancel()
	cs, err := s.session(ctx)
	if err != nil {
		return err
	}
	return s.refresh(ctx, cs, true)
}

// session is the server's client session, connecting one when there is
// none (the first call, or the one after a crash).
func (s *server) session(ctx context.Context) (*mcp.ClientSession, error) {
	// One connection at a time: two calls finding none would each open
	// one, and the second would end the first at the worker.
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.mu.Lock()
	if s.cs != nil && s.conn != nil && s.conn.closedReason() != "" {
		// The worker ended the connection (a stop, a crash) and the SDK
		// has not noticed yet: a new one, rather than a call into the void.
		s.ended(s.cs, true)
	}
	if s.cs != nil {
		cs := s.cs
		s.mu.Unlock()
		return cs, nil
	}
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("the run is over")
	}
	s.mu.Unlock()
	t, wc, err := s.transport()
	if err != nil {
		s.fail(err)
		return nil, err
	}
	opts := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			s.announced()
		},
	}
	if s.ref.Ask != nil {
		opts.ElicitationHandler = s.elicit
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "jetway", Version: "1"}, opts)
	var sopts *mcp.ClientSessionOptions
	if v := s.protocolVersion(wc != nil); v != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: v}
	}
	cs, err := client.Connect(ctx, t, sopts)
	if err != nil {
		err = refusal(s.why(wc, err))
		s.fail(err)
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = cs.Close()
		return nil, errors.New("the run is over")
	}
	s.cs, s.conn, s.state, s.err = cs, wc, "running", ""
	s.connects++
	again := s.connects > 1
	s.mu.Unlock()
	if again {
		// A server started again (after a crash, a stop) may offer other
		// tools than the one before it.
		s.announced()
	}
	go func() {
		_ = cs.Wait()
		s.ended(cs, false)
		s.changed()
	}()
	return cs, nil
}

// transport is how the server is reached: over HTTP from here, or through
// the session's jobs worker.
// StdioProtocolVersion is the MCP version asked of stdio servers when
// Config.ProtocolVersion names none. A stdio server is one process per
// session that each run's connection attaches to in turn, so it must not
// hold per-connection state: from 2026-07-28 on, list_changed reaches only
// a connection with a subscriptions/listen stream open, and the SDK's
// server forgets the session's subscription when an earlier connection's
// stream ends, even after a later one opened its own (so a run attached
// after another could stop hearing its server's changes). Before that
// version the notifications go to the session, whichever run is attached.
const StdioProtocolVersion = "2025-11-25"

// protocolVersion is the version to ask for: the configured one, or for a
// stdio server through a worker StdioProtocolVersion.
func (s *server) protocolVersion(stdio bool) string {
	if v := s.hub.cfg.ProtocolVersion; v != "" || !stdio {
		return v
	}
	return StdioProtocolVersion
}

func (s *server) transport() (mcp.Transport, *workerConn, error) {
	switch agents.MCPTransport(s.spec) {
	case agents.MCPHTTP:
		hdr := http.Header{}
		for name, secret := range s.spec.Headers {
			v, err := agents.ResolveMCPSecret(s.hub.cfg.SecretEnv, s.ref.Tenant, secret, "this runner")
			if err != nil {
				return nil, nil, fmt.Errorf("header %s: %w", name, err)
			}
			hdr.Set(name, v)
		}
		hc := *s.hub.cfg.HTTPClient
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc.Transport = headerTransport{base: base, hdr: hdr}
		return &mcp.StreamableClientTransport{Endpoint: s.spec.URL, HTTPClient: &hc, MaxRetries: 1}, nil, nil
	default:
		if s.hub.cfg.Jobs == nil {
			return nil, nil, errors.New("this runner has no jobs workers to run stdio servers on")
		}
		wt := &workerTransport{jc: s.hub.cfg.Jobs, ref: s.ref, spec: stdioSpec(s.spec, s.ref.Network)}
		return wt, wt.conn(), nil
	}
}

// egressLabel is how the egress guard names what it refuses.
const egressLabel = "MCP server"

// guardedClient is the default client of http servers (see
// Config.HTTPClient): every dial through the egress guard, no proxy, no
// redirects.
func guardedClient(allowHosts []string) *http.Client {
	return egress.NewGuard(allowHosts, egressLabel, "--mcp-allow-host").Client(0)
}

// headerTransport adds the server's configured headers to every request.
type headerTransport struct {
	base http.RoundTripper
	hdr  http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.hdr) == 0 {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.hdr {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// why is err with the reason the worker gave for the connection's end,
// when it gave one: "crashed (exit status 2)" says more than "connection
// closed".
func (s *server) why(wc *workerConn, err error) error {
	if wc != nil {
		if reason := wc.closedReason(); reason != "" {
			return errors.New(reason)
		}
	}
	return err
}

// refusal is the egress guard's refusal err holds, when it holds one: the
// address, the rule and the flag are what a person needs, not the layers
// of the SDK and the HTTP client around it. The SDK passes the transport's
// error on as text, so the refusal is found by its words.
func refusal(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if i := strings.Index(msg, egressLabel+" "+egress.ErrForbiddenTarget.Error()+": "); i >= 0 {
		return errors.New(msg[i:])
	}
	return err
}

func (s *server) fail(err error) {
	s.mu.Lock()
	if !s.closed {
		s.state, s.err = "failed", redact.Text(err.Error())
	}
	s.mu.Unlock()
	s.changed()
}

// changed reports an http server's new state after the run's start (the
// start reports all of them at once).
func (s *server) changed() {
	if agents.MCPTransport(s.spec) == agents.MCPHTTP && s.set != nil && s.set.opened.Load() {
		s.set.report()
	}
}

// ended notes that cs is over: the next call connects again. A
// connection the worker ended because it stopped the server (kill_session,
// Ground Stop, idle) leaves it "stopped"; any other end, "restarting".
func (s *server) ended(cs *mcp.ClientSession, locked bool) {
	if !locked {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	if s.cs != cs {
		return
	}
	s.cs = nil
	if locked {
		go func() { _ = cs.Close() }()
	}
	if s.closed {
		return
	}
	s.state, s.err = "restarting", "the connection ended"
	if s.conn != nil {
		if reason := s.conn.closedReason(); reason != "" {
			s.err = redact.Text(reason)
			if strings.Contains(reason, " was stopped: ") {
				s.state = "stopped"
			}
		}
	}
}

// close ends the run's connection. A server that could not be reached
// stays failed with why until the next run tries again: after the run the
// session detail must still say why its tools were missing.
func (s *server) close() {
	s.mu.Lock()
	cs := s.cs
	s.cs, s.closed = nil, true
	if s.state != "failed" {
		s.state, s.err = "idle", ""
	}
	s.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

// announced notes that the server's tools may have changed and lists
// them again. The count goes up at once, so a listing under way learns
// that it may be out of date; the listing again runs apart, as the SDK
// calls this on its reading goroutine.
func (s *server) announced() {
	s.mu.Lock()
	s.changes++
	s.mu.Unlock()
	go s.listChanged()
}

// listChanged lists the server's tools again after an announcement,
// unless a listing begun since then has already been offered.
func (s *server) listChanged() {
	s.mu.Lock()
	cs := s.cs
	s.mu.Unlock()
	if cs == nil {
		return // the connect under way lists them
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.hub.cfg.ConnectTimeout)
	defer cancel()
	if err := s.refresh(ctx, cs, false); err != nil {
		s.log.Warn().Err(err).Msg("mcp: list the changed tools")
	}
}

// maxListings bounds how often one refresh lists again because the
// server announced a change while it was listed: a server that announces
// at every listing must not hold a run's start until its timeout.
const maxListings = 3

// refresh lists the server's tools and hands them to the target, again
// while the server announces changes during a listing (at most
// maxListings times). Every listing is offered, in turn: an announcement
// makes a listing out of date but does not make it wrong, and dropping it
// left a run without the server's tools until a later listing came in —
// after the run's first model call, for a server that announces a change
// right after it starts (@modelcontextprotocol/server-everything does).
// Unless always, a refresh that finds a listing begun after the last
// announcement already offered has nothing to do, and none lists on a
// connection that is no longer the server's.
func (s *server) refresh(ctx context.Context, cs *mcp.ClientSession, always bool) error {
	s.listMu.Lock()
	defer s.listMu.Unlock()
	for range maxListings {
		s.mu.Lock()
		// A connection replaced while this waited its turn is over: the
		// new one lists for itself.
		seen, done := s.changes, (!always && s.listed == s.changes) || s.cs != cs
		s.mu.Unlock()
		if done {
			return nil
		}
		always = true
		tools, err := s.list(ctx, cs)
		if err != nil {
			return err
		}
		s.mu.Lock()
		closed := s.closed
		s.listed = seen
		current := s.changes == seen
		s.mu.Unlock()
		if closed {
			return nil
		}
		s.target(s.spec.Name, tools)
		if current {
			return nil
		}
	}
	return nil
}

// list is the server's tools as jetway tools, with the resource tools
// when it has resources; a tool that cannot be offered is left out
// (logged).
func (s *server) list(ctx context.Context, cs *mcp.ClientSession) ([]tool.Tool, error) {
	var tools []tool.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			err = fmt.Errorf("list the tools of MCP server %s: %w", s.spec.Name, err)
			s.fail(err)
			return nil, err
		}
		mt, err := s.wrap(t)
		if err != nil {
			s.log.Warn().Err(err).Msg("mcp: tool left out")
			continue
		}
		tools = append(tools, mt)
	}
	return append(tools, s.resourceTools(cs, tools)...), nil
}

var invalidToolChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// wrap makes an MCP tool a jetway tool named mcp__<server>__<tool>.
func (s *server) wrap(t *mcp.Tool) (tool.Tool, error) {
	name := agents.MCPToolName(s.spec.Name, invalidToolChars.ReplaceAllString(t.Name, "_"))
	if len(name) > 64 {
		return nil, fmt.Errorf("tool %q: its name %s is longer than the 64 characters a model takes", t.Name, name)
	}
	schema, err := inputSchema(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
	}
	desc := t.Description
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	return &mcpTool{srv: s, remote: t.Name, spec: llm.ToolSpec{Name: name, Description: desc, InputSchema: schema}}, nil
}

// inputSchema is the tool's schema as the registry takes it: a JSON
// object schema ("type": "object" added where the server left it out).
func inputSchema(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if len(raw) == 0 || string(raw) == "null" {
		m = map[string]any{}
	} else if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, ok := m["type"]; !ok {
		m["type"] = "object"
	}
	if m["type"] != "object" {
		return nil, fmt.Errorf("type %v, not object", m["type"])
	}
	return json.Marshal(m)
}

// mcpTool is one tool of an MCP server as the model sees it.
type mcpTool struct {
	srv    *server
	remote string
	spec   llm.ToolSpec
}

func (t *mcpTool) Spec() llm.ToolSpec { return t.spec }

// ReadOnly is false: a server's readOnlyHint is its own claim, and a
// read-only call may start before its turn is recorded.
func (t *mcpTool) ReadOnly(json.RawMessage) bool { return false }

// Run calls the tool; every failure is an error result the model reads.
func (t *mcpTool) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	args := call.Input
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	return t.srv.call(ctx, "tool "+t.remote, func(ctx context.Context, cs *mcp.ClientSession) (tool.Result, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: t.remote, Arguments: args})
		if err != nil {
			return tool.Result{}, err
		}
		return toResult(res), nil
	})
}

// call runs do with the server's session, within the server's timeout.
// Every failure — the server not available, no answer in time, an error
// of the server or its connection — is an error result the model reads
// (what names the call in it); only the run's own end is an error.
func (s *server) call(ctx context.Context, what string, do func(context.Context, *mcp.ClientSession) (tool.Result, error)) (tool.Result, error) {
	timeout := agents.MCPTimeout(s.spec)
	ctx, cancel := s.deadline(ctx, timeout)
	defer cancel()
	cs, err := s.session(ctx)
	if err != nil {
		return errorResult("MCP server %s is not available: %v", s.spec.Name, err), nil
	}
	res, err := do(ctx, cs)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(context.Cause(ctx), errCallTimeout):
		return errorResult("MCP server %s: %s did not answer within %s; the call was cancelled", s.spec.Name, what, timeout), nil
	case ctx.Err() != nil:
		return tool.Result{}, ctx.Err()
	}
	s.mu.Lock()
	wc := s.conn
	s.mu.Unlock()
	return errorResult("MCP server %s: %s failed: %v", s.spec.Name, what, s.why(wc, err)), nil
}

// errCallTimeout ends a call the server did not answer within its timeout.
var errCallTimeout = errors.New("the MCP server's timeout ran out")

func errorResult(format string, args ...any) tool.Result {
	return tool.Result{Content: fmt.Sprintf(format, args...), IsError: true}
}

// toResult maps a tool's result to jetway's: text as text, pictures as
// images, embedded resources by their text (or what they are),
// structured content as its JSON when no text says it already.
func toResult(res *mcp.CallToolResult) tool.Result {
	var out tool.Result
	var text []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			text = append(text, c.Text)
		case *mcp.ImageContent:
			out.Images = append(out.Images, llm.Image{MediaType: c.MIMEType, Data: base64.StdEncoding.EncodeToString(c.Data)})
		case *mcp.AudioContent:
			text = append(text, fmt.Sprintf("[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *mcp.EmbeddedResource:
			if r := c.Resource; r != nil {
				if r.Text != "" {
					text = append(text, fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text))
				} else {
					text = append(text, fmt.Sprintf("[resource %s, %s, %d bytes]", r.URI, r.MIMEType, len(r.Blob)))
				}
			}
		case *mcp.ResourceLink:
			text = append(text, fmt.Sprintf("[resource link %s %s]", c.URI, c.Name))
		}
	}
	if res.StructuredContent != nil && len(text) == 0 {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			text = append(text, string(b))
		}
	}
	out.Content = strings.Join(text, "\n")
	out.IsError = res.IsError
	if out.Content == "" && len(out.Images) == 0 {
		out.Content = "(the tool returned nothing)"
	}
	return out
}

// Names lists the tool names a Target got, sorted: for logs and tests.
func Names(tools []tool.Tool) []string {
	out := make([]string, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.Spec().Name)
	}
	slices.Sort(out)
	return out
}
