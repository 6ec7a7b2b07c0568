package mcptools_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"jetway/internal/mcptest"
	"jetway/pkg/agent/tool"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/dispatcherapi"
	"jetway/services/mcptools"
)

// person is a fake of the run's approvals: it notes each question and
// decides it as told, after delay (a person who takes their time).
type person struct {
	mu        sync.Mutex
	questions []rec.Question
	reply     rec.Reply
	delay     time.Duration
}

func (p *person) ask(ctx context.Context, q rec.Question) (rec.Reply, error) {
	p.mu.Lock()
	p.questions = append(p.questions, q)
	p.mu.Unlock()
	select {
	case <-time.After(p.delay):
		return p.reply, nil
	case <-ctx.Done():
		return rec.Reply{}, ctx.Err()
	}
}

func (p *person) asked() []rec.Question {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]rec.Question(nil), p.questions...)
}

// openAsking opens spec with p behind the client.
func (e *env) openAsking(p *person, spec dispatcherapi.AgentMCPServer) *offered {
	e.t.Helper()
	o := &offered{tools: map[string]tool.Tool{}}
	set := e.hub.Open(bg, mcptools.Ref{Tenant: tenant, Session: session, Run: "r-1", Ask: p.ask}, []dispatcherapi.AgentMCPServer{spec}, o.target)
	e.t.Cleanup(set.Close)
	return o
}

// A stdio server (through the worker: the SDK sends elicitation/create in
// the middle of the call) and an http one (the newest protocol: an input
// request the client fulfils) both reach the person with the server's
// message, and the answer comes back as the form's content. The person
// takes longer than the server's timeout, which does not run out while
// they are asked.
func TestAn_MCP_servers_question_reaches_the_person_and_the_answer_the_server(t *testing.T) {
	e := newEnv(t)
	web := mcptest.ServeHTTP(t)
	e.hub = mcptools.New(mcptools.Config{Jobs: e.jc, ConnectTimeout: 20 * time.Second, AllowHosts: []string{"127.0.0.1"}})
	for _, spec := range []dispatcherapi.AgentMCPServer{
		{Name: "kit", Command: e.server, Timeout: "300ms"},
		{Name: "web", URL: web.URL, Timeout: "300ms"},
	} {
		t.Run(spec.Name, func(t *testing.T) {
			p := &person{reply: rec.Reply{State: rec.Answered, Answer: "blue"}, delay: time.Second}
			o := e.openAsking(p, spec)
			res := call(t, o, "mcp__"+spec.Name+"__ask", `{"question":"Which colour?"}`)
			if res.IsError || res.Content != "the person answered answer=blue" {
				t.Fatalf("ask = %+v, want the person's answer", res)
			}
			q := p.asked()
			if len(q) != 1 || !strings.Contains(q[0].Text, "MCP server "+spec.Name+" asks: Which colour?") {
				t.Fatalf("the person was asked %+v", q)
			}
		})
	}
}

func TestA_rejected_MCP_question_is_declined_and_an_expired_one_cancelled(t *testing.T) {
	e := newEnv(t)
	for state, want := range map[rec.State]string{rec.Rejected: "the person chose decline", rec.Expired: "the person chose cancel"} {
		p := &person{reply: rec.Reply{State: state, Reason: "no"}}
		o := e.openAsking(p, e.stdio("kit"))
		if res := call(t, o, "mcp__kit__ask", `{"question":"Deploy?"}`); res.IsError || res.Content != want {
			t.Fatalf("%s: ask = %+v, want %q", state, res, want)
		}
	}
}

// A form a one-line answer cannot fill is refused before anyone is asked,
// and the server's error, which says why, reaches the model.
func TestAn_MCP_form_of_several_fields_is_refused_saying_why(t *testing.T) {
	e := newEnv(t)
	p := &person{reply: rec.Reply{State: rec.Answered, Answer: "x"}}
	o := e.openAsking(p, e.stdio("kit"))
	res := call(t, o, "mcp__kit__ask", `{"question":"Who are you?","fields":["name","email"]}`)
	if !res.IsError || !strings.Contains(res.Content, "2 fields (email, name)") {
		t.Fatalf("ask = %+v, want an error naming the fields", res)
	}
	if q := p.asked(); len(q) != 0 {
		t.Fatalf("the person was asked %+v", q)
	}
}
