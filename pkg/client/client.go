// Package client is a small Go client for the dispatcher's HTTP API: send
// input and steers, publish CloudEvents, list sessions and jobs, set a
// session's recovery policy, flip Ground Stop, and follow a session's output
// as Server-Sent Events.
//
// Its errors are written for the person at the terminal: a dispatcher that
// cannot be reached says so and asks whether `jetway dev` is running, and a
// refused request shows the problem+json detail the dispatcher sent.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"jetway/pkg/dispatcherapi"
	"jetway/pkg/events"
)

// Client talks to one dispatcher with one bearer token. It is safe for
// concurrent use.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// Config says where the dispatcher is and how to authenticate; Resolve
// builds one from flags, environment and the dev tokens file.
type Config struct {
	// BaseURL is the dispatcher's root, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token is the bearer token sent with every request.
	Token string
	// HTTPClient is used for every request; nil means a client with no
	// overall timeout (streams are long-lived) whose requests are bounded
	// by their contexts.
	HTTPClient *http.Client
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: jetway URL %q is not an http(s) URL like %s", cfg.BaseURL, DefaultURL)
	}
	if cfg.Token == "" {
		return nil, errors.New("client: no token: set " + EnvToken + ", pass --token, or run `jetway dev` to create " + DefaultTokensFile)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: u, token: cfg.Token, http: hc}, nil
}

// BaseURL is the dispatcher root this client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// The dispatcher's wire types (pkg/dispatcherapi), under the names this
// client has always used.
type (
	// Accepted is the dispatcher's answer to an accepted event.
	Accepted = dispatcherapi.Accepted
	// Session is one session record as the runner stores it; Record is kept
	// as raw JSON so the client does not break when the record grows.
	Session = dispatcherapi.SessionInfo
	// Job is one background job record as the jobs service stores it.
	Job = dispatcherapi.JobInfo
	// StopState is the state of one Ground Stop switch.
	StopState = dispatcherapi.StopState
	// StopSwitch is one Ground Stop switch that is on and covers a session.
	StopSwitch = dispatcherapi.StopSwitch
	// Layover is work the agent set down, waiting for something.
	Layover = dispatcherapi.Layover
	// RecoveryOverride is what a session record sets of its recovery rule;
	// a nil field keeps the default.
	RecoveryOverride = dispatcherapi.RecoveryOverride
	// RecoverySettings is the recovery rule in effect.
	RecoverySettings = dispatcherapi.RecoverySettings
	// Recovery is a session's recovery override and the settings in effect.
	Recovery = dispatcherapi.RecoveryState
	// SessionDetail is a session's state, Ground Stop, waiting events,
	// running jobs, layovers and recovery rule.
	SessionDetail = dispatcherapi.SessionDetail
	// TranscriptPage is a page of a session's history.
	TranscriptPage = dispatcherapi.TranscriptPage
	// TranscriptEntry is one record of a session's history.
	TranscriptEntry = dispatcherapi.TranscriptEntry
	// TranscriptBlock is one part of a turn in a session's history.
	TranscriptBlock = dispatcherapi.TranscriptBlock
	// JobSummary is a background job as its worker reports it.
	JobSummary = dispatcherapi.JobSummary
	// JobOutputRequest picks the lines of a job's output to read.
	JobOutputRequest = dispatcherapi.JobOutputRequest
	// JobOutput is lines of a job's output.
	JobOutput = dispatcherapi.JobOutput
	// Agent is an agent profile: instructions, model, tools, limits.
	Agent = dispatcherapi.Agent
)

// StopTarget names a Ground Stop switch. The zero value is the caller's
// default: the global switch for an operator token, its own tenant for any
// other.
type StopTarget struct {
	// Global asks for the global switch (operator token only; a tenant
	// admin gets 403).
	Global bool
	// Tenant names another tenant (operator token only).
	Tenant  string
	Session string
	// OwnTenant asks for the token's own tenant's switch, which is not an
	// operator token's default (operator tokens of no tenant are refused).
	OwnTenant bool
}

func (t StopTarget) query() url.Values {
	q := url.Values{}
	switch {
	case t.Global:
		q.Set("scope", "global")
	case t.OwnTenant:
		q.Set("scope", "tenant")
	}
	if t.Tenant != "" {
		q.Set("tenant", t.Tenant)
	}
	if t.Session != "" {
		q.Set("session", t.Session)
	}
	if len(q) == 0 {
		return nil
	}
	return q
}

// Input sends a line of text into session (POST /v1/sessions/{session}/input).
func (c *Client) Input(ctx context.Context, session, text string) (Accepted, error) {
	var acc Accepted
	err := c.doJSON(ctx, http.MethodPost, sessionPath(session, "input"), nil, dispatcherapi.InputRequest{Text: text}, &acc)
	return acc, err
}

// InputAgent sends a line of text into session and binds the session to
// the agent profile agent from its next run on ("" keeps its binding).
func (c *Client) InputAgent(ctx context.Context, session, text, agent string) (Accepted, error) {
	var acc Accepted
	err := c.doJSON(ctx, http.MethodPost, sessionPath(session, "input"), nil, dispatcherapi.InputRequest{Text: text, Agent: agent}, &acc)
	return acc, err
}

// Steer redirects work already under way (POST /v1/sessions/{session}/steer).
func (c *Client) Steer(ctx context.Context, session, note string) (Accepted, error) {
	var acc Accepted
	err := c.doJSON(ctx, http.MethodPost, sessionPath(session, "steer"), nil, dispatcherapi.SteerRequest{Note: note}, &acc)
	return acc, err
}

// SteerAgent steers session and binds it to the agent profile agent from
// its next run on ("" keeps its binding).
func (c *Client) SteerAgent(ctx context.Context, session, note, agent string) (Accepted, error) {
	var acc Accepted
	err := c.doJSON(ctx, http.MethodPost, sessionPath(session, "steer"), nil, dispatcherapi.SteerRequest{Note: note, Agent: agent}, &acc)
	return acc, err
}

// Publish sends a CloudEvent in structured mode (POST /v1/events). Its
// subject attribute must be `<tenant>/<session>` with the token's tenant.
func (c *Client) Publish(ctx context.Context, e event.Event) (Accepted, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return Accepted{}, fmt.Errorf("client: encode cloudevent %s: %w", e.ID(), err)
	}
	var acc Accepted
	err = c.do(ctx, http.MethodPost, "/v1/events", nil, events.ContentTypeStructured, bytes.NewReader(body), &acc)
	return acc, err
}

// Sessions lists the tenant's sessions (GET /v1/sessions).
func (c *Client) Sessions(ctx context.Context) ([]Session, error) {
	var out dispatcherapi.SessionList
	err := c.doJSON(ctx, http.MethodGet, "/v1/sessions", nil, nil, &out)
	return out.Sessions, err
}

// Session reads one session record (GET /v1/sessions/{session}).
func (c *Client) Session(ctx context.Context, session string) (Session, error) {
	var out Session
	err := c.doJSON(ctx, http.MethodGet, sessionPath(session, ""), nil, nil, &out)
	return out, err
}

// Jobs lists a session's background jobs (GET /v1/sessions/{session}/jobs).
func (c *Client) Jobs(ctx context.Context, session string) ([]Job, error) {
	var out dispatcherapi.JobList
	err := c.doJSON(ctx, http.MethodGet, sessionPath(session, "jobs"), nil, nil, &out)
	return out.Jobs, err
}

// Stop reads a Ground Stop switch: session's when given, else the token's
// default (see StopTarget).
func (c *Client) Stop(ctx context.Context, session string) (StopState, error) {
	return c.StopAt(ctx, StopTarget{Session: session})
}

// StopAt reads the Ground Stop switch t names.
func (c *Client) StopAt(ctx context.Context, t StopTarget) (StopState, error) {
	var st StopState
	err := c.doJSON(ctx, http.MethodGet, "/v1/stop", t.query(), nil, &st)
	return st, err
}

// SetStop turns Ground Stop on (admin token) for session, or for the
// token's default scope when session is empty.
func (c *Client) SetStop(ctx context.Context, session, reason string) (StopState, error) {
	return c.SetStopAt(ctx, StopTarget{Session: session}, reason)
}

// SetStopAt turns on the Ground Stop switch t names.
func (c *Client) SetStopAt(ctx context.Context, t StopTarget, reason string) (StopState, error) {
	var st StopState
	var body any
	if reason != "" {
		body = dispatcherapi.StopRequest{Reason: reason}
	}
	err := c.doJSON(ctx, http.MethodPost, "/v1/stop", t.query(), body, &st)
	return st, err
}

// ClearStop turns Ground Stop off (admin token).
func (c *Client) ClearStop(ctx context.Context, session string) (StopState, error) {
	return c.ClearStopAt(ctx, StopTarget{Session: session})
}

// ClearStopAt turns off the Ground Stop switch t names.
func (c *Client) ClearStopAt(ctx context.Context, t StopTarget) (StopState, error) {
	var st StopState
	err := c.doJSON(ctx, http.MethodDelete, "/v1/stop", t.query(), nil, &st)
	return st, err
}

// sessionPath builds /v1/sessions/<session>[/<tail>] with the session
// escaped, so a bad name reaches the dispatcher (which says what is wrong
// with it) instead of silently addressing another path.
func sessionPath(session, tail string) string {
	p := "/v1/sessions/" + url.PathEscape(session)
	if tail != "" {
		p += "/" + tail
	}
	return p
}

func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: encode %s %s: %w", method, path, err)
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	return c.do(ctx, method, path, q, ct, body, out)
}

// do sends one request and decodes a 2xx JSON answer into out; anything
// else becomes an *APIError or *UnreachableError.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, contentType string, body io.Reader, out any) error {
	resp, err := c.send(ctx, method, path, q, contentType, body, "application/json")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read: a failed close loses nothing
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("client: read answer of %s %s: %w", method, path, err)
	}
	if out == nil || len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("client: answer of %s %s is not the expected JSON: %w", method, path, err)
	}
	return nil
}

// send makes the request and turns transport failures and non-2xx answers
// into errors; on success the caller owns resp.Body.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, contentType string, body io.Reader, accept string, extra ...string) (*http.Response, error) {
	// path is already escaped (sessionPath): it goes on the wire as it is,
	// and Path gets its unescaped form so the two agree and url.URL does
	// not escape it a second time.
	plain, err := url.PathUnescape(path)
	if err != nil {
		return nil, fmt.Errorf("client: bad path %q: %w", path, err)
	}
	u := *c.base
	u.Path = strings.TrimRight(c.base.Path, "/") + plain
	u.RawPath = strings.TrimRight(c.base.EscapedPath(), "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("client: build %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", accept)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: %s %s: %w", method, path, ctx.Err())
		}
		return nil, &UnreachableError{URL: c.base.String(), Err: err}
	}
	if resp.StatusCode/100 != 2 {
		defer func() { _ = resp.Body.Close() }() // read: a failed close loses nothing
		return nil, readAPIError(method, path, resp)
	}
	return resp, nil
}

// Resume sends an interrupted session on (POST /v1/sessions/{s}/resume);
// an empty note takes the server's default.
func (c *Client) Resume(ctx context.Context, session, note string) (Accepted, error) {
	var acc Accepted
	err := c.doJSON(ctx, http.MethodPost, sessionPath(session, "resume"), nil, dispatcherapi.ResumeRequest{Note: note}, &acc)
	return acc, err
}

// Layovers lists a session's layovers.
func (c *Client) Layovers(ctx context.Context, session string) ([]Layover, error) {
	var out dispatcherapi.LayoverList
	err := c.doJSON(ctx, http.MethodGet, sessionPath(session, "layovers"), nil, nil, &out)
	return out.Layovers, err
}

// CancelLayover cancels a session's layover; it reports whether there was one.
func (c *Client) CancelLayover(ctx context.Context, session string) (bool, error) {
	var out dispatcherapi.LayoverCancelled
	err := c.doJSON(ctx, http.MethodDelete, sessionPath(session, "layover"), nil, nil, &out)
	return out.Cancelled, err
}

// Recovery reads a session's recovery policy
// (GET /v1/sessions/{session}/recovery).
func (c *Client) Recovery(ctx context.Context, session string) (Recovery, error) {
	var out Recovery
	err := c.doJSON(ctx, http.MethodGet, sessionPath(session, "recovery"), nil, nil, &out)
	return out, err
}

// SetRecovery replaces a session's recovery override with o
// (PUT /v1/sessions/{session}/recovery): a nil field clears that part.
func (c *Client) SetRecovery(ctx context.Context, session string, o RecoveryOverride) (Recovery, error) {
	var out Recovery
	err := c.doJSON(ctx, http.MethodPut, sessionPath(session, "recovery"), nil, o, &out)
	return out, err
}

// ClearRecovery removes a session's recovery override, so the defaults
// apply again (DELETE /v1/sessions/{session}/recovery).
func (c *Client) ClearRecovery(ctx context.Context, session string) (Recovery, error) {
	var out Recovery
	err := c.doJSON(ctx, http.MethodDelete, sessionPath(session, "recovery"), nil, nil, &out)
	return out, err
}

// Agents lists the tenant's agent profiles, "default" always among them
// (GET /v1/agents).
func (c *Client) Agents(ctx context.Context) ([]Agent, error) {
	var out dispatcherapi.AgentList
	err := c.doJSON(ctx, http.MethodGet, "/v1/agents", nil, nil, &out)
	return out.Agents, err
}

// Agent reads one agent profile (GET /v1/agents/{name}).
func (c *Client) Agent(ctx context.Context, name string) (Agent, error) {
	var out Agent
	err := c.doJSON(ctx, http.MethodGet, agentPath(name), nil, nil, &out)
	return out, err
}

// PutAgent stores a as the profile name and returns it with its new version
// (PUT /v1/agents/{name}; an admin token).
func (c *Client) PutAgent(ctx context.Context, name string, a Agent) (Agent, error) {
	var out Agent
	err := c.doJSON(ctx, http.MethodPut, agentPath(name), nil, a, &out)
	return out, err
}

// DeleteAgent deletes the profile name and reports whether there was one
// (DELETE /v1/agents/{name}; an admin token).
func (c *Client) DeleteAgent(ctx context.Context, name string) (bool, error) {
	var out dispatcherapi.AgentDeleted
	err := c.doJSON(ctx, http.MethodDelete, agentPath(name), nil, nil, &out)
	return out.Deleted, err
}

func agentPath(name string) string { return "/v1/agents/" + url.PathEscape(name) }
