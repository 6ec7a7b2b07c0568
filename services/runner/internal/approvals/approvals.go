// Package approvals is the runner's side of a person in the loop. A call
// a profile's tools.ask rule covers, and every ask_person question, is not
// run: it is recorded as a pending approval (pkg/control/approvals) with a
// timeout schedule, and the run ends, holding no goroutine and no model
// stream while the person takes hours. The decision comes back as an
// io.jetway.approval.decided event on the session, which the actor turns
// into what the model reads with Deliver: an approved call runs there,
// exactly once, and its result is the text.
//
// Exactly once rests on the record's compare-and-swap: Deliver moves an
// approved record to executing (naming the event that delivers it) before
// the call starts, and done with its result after. A redelivery of the
// same event (the runner died meanwhile) finds executing and does not run
// the call again; one that finds done reads the result back.
package approvals

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/agent/permission"
	"jetway/pkg/agent/tool"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	rec "jetway/pkg/control/approvals"
	"jetway/pkg/events"
	"jetway/pkg/redact"
)

// AskPersonTool is the tool a model asks a person a question with.
const AskPersonTool = "ask_person"

// Gate records approvals and delivers their decisions for one runner.
type Gate struct {
	KV     jetstream.KeyValue // the control bucket
	JS     jetstream.JetStream
	Source string // CloudEvents source of the timeout events
	// Partitions is P: a timeout fires into its session's partition
	// (events.FiredSubject).
	Partitions int
	// Publish tells the session's watchers (jetway.out: chat, console,
	// notifier) that a person is asked.
	Publish func(ctx context.Context, tenant, session string, p events.Payload)
	// Now is the clock (time.Now when nil); a test moves it.
	Now func() time.Time
}

// Ref is the run a request comes from, and what its calls run with.
type Ref struct {
	Tenant, Session, Run string
	Lineage              []string
	Network              string
}

// ErrNotDecided refuses a decided event whose approval is still pending
// (published by someone other than jetway, or a timeout before its time)
// or was delivered by another event already.
var ErrNotDecided = errors.New("approval not decided")

func (g *Gate) now() time.Time {
	if g.Now != nil {
		return g.Now().UTC()
	}
	return time.Now().UTC()
}

// Tools returns tools with every call prof's tools.ask covers held for a
// person, and ask_person added.
func (g *Gate) Tools(ref Ref, prof agents.Profile, tools []tool.Tool) []tool.Tool {
	out := make([]tool.Tool, 0, len(tools)+1)
	for _, t := range tools {
		if covers(prof.Tools.Ask, t.Spec().Name) {
			t = asked{Tool: t, g: g, ref: ref, prof: prof}
		}
		out = append(out, t)
	}
	return append(out, g.askPerson(ref, prof))
}

// Unheld are the ask rules a run cannot hold a call for, to be denied
// instead: those naming MCP tools, whose calls an approval could not run
// later (their servers are connected by a run, not by the runner). A rule
// meant to ask a person never lets a call through unasked.
func Unheld(ask []string) []string {
	var out []string
	for _, r := range ask {
		if strings.HasPrefix(strings.TrimSpace(r), "mcp__") {
			out = append(out, r)
		}
	}
	return out
}

// covers reports whether any rule may hold a call of the tool name.
func covers(rules []string, name string) bool {
	for _, r := range rules {
		toolPart, _, _ := strings.Cut(strings.TrimSpace(r), "(")
		if permission.Match(toolPart, name, nil) {
			return true
		}
	}
	return false
}

// asked is a tool some of whose calls wait for a person.
type asked struct {
	tool.Tool
	g    *Gate
	ref  Ref
	prof agents.Profile
}

func (t asked) held(input json.RawMessage) bool {
	name := t.Spec().Name
	for _, r := range t.prof.Tools.Ask {
		if permission.Match(r, name, input) {
			return true
		}
	}
	return false
}

// ReadOnly: a held call must never start while the model still streams.
func (t asked) ReadOnly(input json.RawMessage) bool {
	return !t.held(input) && t.Tool.ReadOnly(input)
}

func (t asked) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	if !t.held(call.Input) {
		return t.Tool.Run(ctx, call)
	}
	a := t.g.request(t.ref, t.prof, call)
	a.Kind, a.Tool, a.Input = rec.KindTool, t.Spec().Name, call.Input
	return t.g.hold(ctx, a, fmt.Sprintf("This call of %s needs a person's approval", a.Tool))
}

var askSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"question":{"type":"string","description":"the question, complete enough to answer without the conversation"},` +
	`"choices":{"type":"array","items":{"type":"string"},"description":"the answers to choose from, when there are a few"}},` +
	`"required":["question"]}`)

func (g *Gate) askPerson(ref Ref, prof agents.Profile) tool.Tool {
	return tool.Func{
		Name: AskPersonTool,
		Description: "Ask a person a question when you need information or a choice only they can give. " +
			"The run ends now; the answer comes back as this call's result in a later turn, possibly hours later.",
		Schema: askSchema,
		Fn: func(ctx context.Context, call tool.Call) (tool.Result, error) {
			var in struct {
				Question string   `json:"question"`
				Choices  []string `json:"choices"`
			}
			if err := json.Unmarshal(call.Input, &in); err != nil || strings.TrimSpace(in.Question) == "" {
				return tool.Result{Content: "ask_person needs a question", IsError: true}, nil
			}
			a := g.request(ref, prof, call)
			a.Kind, a.Question, a.Choices = rec.KindQuestion, in.Question, in.Choices
			return g.hold(ctx, a, "Your question was put to a person")
		},
	}
}

func (g *Gate) request(ref Ref, prof agents.Profile, call tool.Call) rec.Approval {
	now := g.now()
	approvers := prof.Approvers
	if approvers == "" {
		approvers = agents.ApproversTenant
	}
	return rec.Approval{ID: newID(), Tenant: ref.Tenant, Session: ref.Session, Run: ref.Run, CallID: call.ID,
		Lineage: ref.Lineage, Network: ref.Network,
		Approvers: approvers, RequestedAt: now, ExpiresAt: now.Add(agents.ApprovalTimeout(prof)), State: rec.Pending}
}

// hold records a pending approval with its timeout and ends the run.
func (g *Gate) hold(ctx context.Context, a rec.Approval, what string) (tool.Result, error) {
	a.Schedule = "t" + a.ID
	if err := g.scheduleTimeout(ctx, a); err != nil {
		return tool.Result{Content: "could not ask a person: " + err.Error(), IsError: true}, nil
	}
	if _, err := rec.Create(ctx, g.KV, a); err != nil {
		return tool.Result{Content: "could not ask a person: " + err.Error(), IsError: true}, nil
	}
	if g.Publish != nil {
		g.Publish(ctx, a.Tenant, a.Session, Requested(a))
	}
	msg := fmt.Sprintf("%s (approval %s); it has not run. The run ends now: the decision, and the result if approved, come in a later turn. "+
		"Nobody deciding by %s counts as a rejection.", what, a.ID, a.ExpiresAt.Format(time.RFC3339))
	return tool.Result{Content: msg, Stop: true, StopMessage: "waiting for a person: approval " + a.ID}, nil
}

// scheduleTimeout books the decided event a timeout fires: a JetStream
// message schedule held in JETWAY_SCHEDULES, as a layover's resume is.
func (g *Gate) scheduleTimeout(ctx context.Context, a rec.Approval) error {
	ev, err := events.New(a.Tenant, a.Session, g.Source, events.ApprovalDecided{Approval: a.ID, Decision: rec.DecisionTimeout})
	if err != nil {
		return err
	}
	holder, err := events.ScheduleSubject(a.Tenant, a.Session, a.Schedule)
	if err != nil {
		return err
	}
	target, err := events.FiredSubject(bus.PartitionFor(a.Tenant, a.Session, g.Partitions), a.Tenant, a.Session)
	if err != nil {
		return err
	}
	msg, err := events.Encode(ctx, holder, ev)
	if err != nil {
		return err
	}
	at := a.ExpiresAt.Truncate(time.Second).Add(time.Second) // @at has second resolution
	if _, err := g.JS.PublishMsg(ctx, msg, jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget(target)); err != nil {
		return fmt.Errorf("schedule approval timeout: %w", err)
	}
	return nil
}

// Requested is the output event saying a is asked; its input redacted.
func Requested(a rec.Approval) events.ApprovalRequested {
	out := events.ApprovalRequested{Approval: a.ID, Run: a.Run, Kind: string(a.Kind), Tool: a.Tool,
		Question: a.Question, Choices: a.Choices, Approvers: a.Approvers, ExpiresAt: a.ExpiresAt}
	if len(a.Input) > 0 {
		out.Input = redact.JSON(a.Input)
	}
	return out
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "ap-" + hex.EncodeToString(b[:])
}
