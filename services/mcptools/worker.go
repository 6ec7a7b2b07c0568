package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"jetway/pkg/control/agents"
	jobsclient "jetway/services/jobs/client"
	"jetway/services/jobs/jobsapi"
)

// recvWait is how long one receive waits on the worker before asking
// again: under the worker's cap, and short enough that a connection the
// run left is noticed soon.
const recvWait = 20 * time.Second

func stdioSpec(s agents.MCPServer, network string) jobsapi.MCPServer {
	return jobsapi.MCPServer{Name: s.Name, Command: s.Command, Args: s.Args, Env: s.Env, Secrets: s.Secrets, Network: network}
}

// workerTransport is an mcp.Transport to a stdio server in the session's
// jobs worker: JSON-RPC messages go out with mcp_send and come back from
// mcp_recv long polls (see package jobsapi).
type workerTransport struct {
	jc   *jobsclient.Client
	ref  Ref
	spec jobsapi.MCPServer

	once sync.Once
	wc   *workerConn
}

// conn is the connection Connect fills in, made before it so the caller
// can ask it why it ended even when Connect failed.
func (t *workerTransport) conn() *workerConn {
	t.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		t.wc = &workerConn{jc: t.jc, ctx: ctx, cancel: cancel}
	})
	return t.wc
}

// Connect opens a connection to the server, starting it on the worker
// when it does not run.
func (t *workerTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	wc := t.conn()
	sr := jobsapi.SessionRequest{Tenant: t.ref.Tenant, Session: t.ref.Session, Lineage: t.ref.Lineage, Fence: t.ref.Run}
	res, err := t.jc.MCPOpen(ctx, jobsapi.MCPOpenRequest{SessionRequest: sr, Server: t.spec, Run: t.ref.Run})
	for notYet(err) && ctx.Err() == nil {
		// Its npx package is installing: the worker waited a while before
		// it said so, and the connect timeout bounds how often it is asked.
		res, err = t.jc.MCPOpen(ctx, jobsapi.MCPOpenRequest{SessionRequest: sr, Server: t.spec, Run: t.ref.Run})
	}
	if err != nil {
		wc.setReason(err.Error())
		return nil, fmt.Errorf("start MCP server %s on the session's jobs worker: %w", t.spec.Name, err)
	}
	wc.req = jobsapi.MCPConnRequest{SessionRequest: sr, Server: t.spec.Name, Conn: res.Conn}
	return wc, nil
}

// notYet says the worker is still preparing the server (installing its
// package) and asks to be asked again.
func notYet(err error) bool {
	var je *jobsapi.Error
	return errors.As(err, &je) && je.Code == jobsapi.CodeNotYet
}

// workerConn is one connection to a worker-hosted server.
type workerConn struct {
	jc     *jobsclient.Client
	req    jobsapi.MCPConnRequest
	ctx    context.Context // ends with Close
	cancel context.CancelFunc

	mu     sync.Mutex
	buf    []jsonrpc.Message
	reason string // why the connection ended, as the worker said
	closed bool
}

func (c *workerConn) setReason(r string) {
	c.mu.Lock()
	if c.reason == "" {
		c.reason = r
	}
	c.mu.Unlock()
}

func (c *workerConn) closedReason() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// Read returns the server's next message, polling the worker for more.
func (c *workerConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		c.mu.Lock()
		if len(c.buf) > 0 {
			m := c.buf[0]
			c.buf = c.buf[1:]
			c.mu.Unlock()
			return m, nil
		}
		if c.closed {
			reason := c.reason
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", mcp.ErrConnectionClosed, reason)
		}
		c.mu.Unlock()
		if err := c.poll(ctx); err != nil {
			return nil, err
		}
	}
}

// poll asks the worker once for what the server wrote.
func (c *workerConn) poll(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	res, err := c.jc.MCPRecv(ctx, jobsapi.MCPRecvRequest{MCPConnRequest: c.req, WaitMS: recvWait.Milliseconds()})
	if err != nil {
		if c.ctx.Err() != nil {
			return mcp.ErrConnectionClosed
		}
		c.setReason(err.Error())
		var je *jobsapi.Error
		if errors.As(err, &je) || ctx.Err() != nil {
			return fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
		}
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, raw := range res.Messages {
		m, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			continue // not JSON-RPC: a server's stray output
		}
		c.buf = append(c.buf, m)
	}
	if res.Closed {
		c.closed = true
		if c.reason == "" {
			c.reason = res.Reason
		}
	}
	return nil
}

// Write sends one message to the server.
func (c *workerConn) Write(ctx context.Context, m jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return err
	}
	err = c.jc.MCPSend(ctx, jobsapi.MCPSendRequest{MCPConnRequest: c.req, Messages: []json.RawMessage{data}})
	if err != nil {
		// The worker refused the message (the connection is gone there) or
		// does not answer (it died): the connection is over, and a read
		// still waiting on that worker would only learn it at its timeout.
		c.setReason(err.Error())
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		return fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
	}
	return nil
}

// Close detaches from the server (which goes on running until its idle
// timeout) and ends a pending Read.
func (c *workerConn) Close() error {
	c.mu.Lock()
	already := c.closed && c.ctx.Err() != nil
	c.closed = true
	c.mu.Unlock()
	if already {
		return nil
	}
	c.cancel()
	if c.req.Conn == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.jc.MCPClose(ctx, c.req)
	return nil
}

func (c *workerConn) SessionID() string { return "" }
