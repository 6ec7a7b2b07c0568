package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/control/agents"
	api "jetway/pkg/dispatcherapi"
)

// This file manages the tenants' agent profiles (package
// pkg/control/agents): any token of a tenant reads them, an admin token
// stores and deletes them. The dispatcher is their only writer, so every
// stored profile has passed agents.Validate.

// SubjectAgents is the NATS API subject of agent profiles.
const SubjectAgents = api.SubjectAgents

// Agent is an agent profile on the wire; AgentList answers a listing.
type (
	Agent     = api.Agent
	AgentList = api.AgentList
)

// agentsCore keeps the tenants' agent profiles, and answers the events
// core whether a profile an event names exists.
type agentsCore struct {
	*store
	log zerolog.Logger
}

func (d *agentsCore) agentsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return d.requiredBucket(ctx, bus.BucketAgents, "Agents")
}

// Agents lists the caller's tenant's agent profiles, the default one
// always among them.
func (d *agentsCore) Agents(ctx context.Context, p auth.Principal) (AgentList, error) {
	kv, err := d.agentsBucket(ctx)
	if err != nil {
		return AgentList{}, err
	}
	list, err := agents.List(ctx, kv, p.Tenant)
	if err != nil {
		return AgentList{}, unavailable("list agent profiles", err)
	}
	return AgentList{Agents: list}, nil
}

// Agent reads one of the caller's tenant's agent profiles.
func (d *agentsCore) Agent(ctx context.Context, p auth.Principal, name string) (Agent, error) {
	if err := agentName(name); err != nil {
		return Agent{}, err
	}
	kv, err := d.agentsBucket(ctx)
	if err != nil {
		return Agent{}, err
	}
	a, err := agents.Get(ctx, kv, p.Tenant, name)
	return a, agentProblem(p.Tenant, name, err)
}

// PutAgent stores a profile as the caller's tenant's agent name (an admin
// token's right); it applies from the next run of each session bound to it.
func (d *agentsCore) PutAgent(ctx context.Context, p auth.Principal, name string, a Agent) (Agent, error) {
	if err := p.MayAdminister(); err != nil {
		return Agent{}, problemf(http.StatusForbidden, "forbidden", "Forbidden",
			"storing an agent profile needs an admin token of the tenant: %s", trimPrefix(err))
	}
	if err := agentName(name); err != nil {
		return Agent{}, err
	}
	if a.Name != "" && a.Name != name {
		pr := problemf(http.StatusBadRequest, "invalid-agent", "Invalid agent profile",
			"name: the body names %q, the path %q", shortenQ(a.Name), name)
		pr.Field = "name"
		return Agent{}, pr
	}
	kv, err := d.agentsBucket(ctx)
	if err != nil {
		return Agent{}, err
	}
	stored, err := agents.Put(ctx, kv, p.Tenant, name, a)
	if err != nil {
		return Agent{}, agentProblem(p.Tenant, name, err)
	}
	d.log.Info().Str("tenant", p.Tenant).Str("agent", name).Uint64("version", stored.Version).Msg("agent profile stored")
	return stored, nil
}

// DeleteAgent deletes one of the caller's tenant's profiles (an admin
// token's right). Runs that started with it keep their version; new
// events naming it are refused. Deleting "default" brings back the
// implicit default.
func (d *agentsCore) DeleteAgent(ctx context.Context, p auth.Principal, name string) (api.AgentDeleted, error) {
	if err := p.MayAdminister(); err != nil {
		return api.AgentDeleted{}, problemf(http.StatusForbidden, "forbidden", "Forbidden",
			"deleting an agent profile needs an admin token of the tenant: %s", trimPrefix(err))
	}
	if err := agentName(name); err != nil {
		return api.AgentDeleted{}, err
	}
	kv, err := d.agentsBucket(ctx)
	if err != nil {
		return api.AgentDeleted{}, err
	}
	ok, err := agents.Delete(ctx, kv, p.Tenant, name)
	if err != nil {
		return api.AgentDeleted{}, unavailable("delete agent profile", err)
	}
	if ok {
		d.log.Info().Str("tenant", p.Tenant).Str("agent", name).Msg("agent profile deleted")
	}
	return api.AgentDeleted{Deleted: ok}, nil
}

// agentName refuses a name that cannot name a profile.
func agentName(name string) error {
	if agents.ValidName(name) {
		return nil
	}
	pr := problemf(http.StatusBadRequest, "invalid-agent", "Invalid agent name",
		"agent %q: a name is 1–64 of A-Z a-z 0-9 _ -", shortenQ(name))
	pr.Field = "name"
	return pr
}

// agentProblem is the problem a caller sees for err from package agents.
func agentProblem(tenant, name string, err error) error {
	var fe *agents.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		pr := problemf(http.StatusBadRequest, "invalid-agent", "Invalid agent profile", "%s: %s", fe.Field, fe.Reason)
		pr.Field = fe.Field
		return pr
	case errors.Is(err, agents.ErrNotFound):
		return unknownAgent(tenant, name)
	}
	return unavailable("agent profile", err)
}

// unknownAgent is the 404 of a name the tenant has no profile for.
func unknownAgent(tenant, name string) *Problem {
	pr := problemf(http.StatusNotFound, "unknown-agent", "Unknown agent",
		"tenant %s has no agent profile %q (GET /v1/agents lists them)", tenant, name)
	pr.Field = "agent"
	return pr
}

// decodeAgent reads a PUT body strictly: a misspelt field would otherwise
// read as absent and quietly take the runner's default.
func decodeAgent(b []byte) (Agent, error) {
	var a Agent
	if len(bytes.TrimSpace(b)) == 0 {
		return a, problem(http.StatusBadRequest, "bad-request", "Missing body",
			`send at least {"instructions": "..."}; docs/PROFILES.md has every field`)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		pr := problemf(http.StatusBadRequest, "invalid-agent", "Invalid agent profile", "%v", err)
		pr.Field = jsonField(err)
		return a, pr
	}
	if dec.More() {
		return a, problem(http.StatusBadRequest, "bad-request", "Malformed JSON body", "more than one JSON value")
	}
	return a, nil
}

// jsonField is the field a JSON decoding error is about, when it says.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	var name string
	if _, scanErr := fmt.Sscanf(err.Error(), "json: unknown field %q", &name); scanErr == nil {
		return name
	}
	return ""
}

// agentExists refuses an event that binds its session to a profile the
// tenant does not have ("" binds nothing): the 404 names it, and nothing
// is published. The default profile always exists.
func (d *agentsCore) agentExists(ctx context.Context, tenant, name string) error {
	if name == "" || name == agents.DefaultName {
		return nil
	}
	kv, err := d.agentsBucket(ctx)
	if err != nil {
		return err
	}
	prof, err := agents.Get(ctx, kv, tenant, name)
	if err != nil {
		return agentProblem(tenant, name, err)
	}
	return d.modelServed(ctx, prof)
}

// modelServed refuses a profile whose model no live runner says it can
// call (their heartbeats list what they serve, agents.ServingKey): the
// run would only be refused by the runner, after "sent". It refuses
// nothing it cannot be sure of: a profile on the runner's own model, no
// live runner (the event waits for one), a runner that does not say, or a
// bucket that cannot be read.
func (d *agentsCore) modelServed(ctx context.Context, prof agents.Profile) error {
	key := agents.ServingKey(prof.Model)
	if key == "" {
		return nil
	}
	entries, err := d.scan(ctx, bus.BucketRunners, ">")
	if err != nil {
		d.log.Warn().Err(err).Msg("read runner heartbeats for a send's model check")
		return nil
	}
	live := 0
	for _, e := range entries {
		var b struct {
			Models *[]string `json:"models"`
		}
		if json.Unmarshal(e.Value(), &b) != nil || time.Since(e.Created()) > ClusterStaleAfter {
			continue
		}
		if b.Models == nil || slices.Contains(*b.Models, key) {
			return nil
		}
		live++
	}
	if live == 0 {
		return nil
	}
	pr := problemf(http.StatusUnprocessableEntity, "model-not-served", "No runner serves the agent's model",
		"agent %s names the model %s, and none of the %d live runners can call it: %s",
		prof.Name, describeModel(prof.Model), live, configureHint(prof.Model))
	pr.Field = "agent"
	return pr
}

// describeModel is a profile's model as a person wrote it.
func describeModel(m agents.Model) string {
	s := m.Provider
	if m.Name != "" {
		s += " " + m.Name
	}
	if m.Endpoint != "" {
		s += " at endpoint " + m.Endpoint
	}
	return s
}

// configureHint says what the runners' environment needs for m
// (docs/PROFILES.md).
func configureHint(m agents.Model) string {
	if m.Endpoint != "" {
		v := "JETWAY_ENDPOINT_" + strings.TrimPrefix(agents.ServingKey(m), m.Provider+"@")
		return fmt.Sprintf("set %s_BASE_URL (%s_SCRIPT for a script) and %s_KEY_ENV, the name of the variable holding its key, on the runners (docs/PROFILES.md)", v, v, v)
	}
	switch m.Provider {
	case agents.ProviderAnthropic:
		return "set ANTHROPIC_API_KEY on the runners (docs/PROFILES.md)"
	case agents.ProviderOpenAI:
		return "set OPENAI_API_KEY or OPENAI_BASE_URL on the runners (docs/PROFILES.md)"
	}
	return "configure it on the runners (docs/PROFILES.md)"
}

// asAgentField is a name problem about an input's "agent" field.
func asAgentField(err error) error {
	var pr *Problem
	if errors.As(err, &pr) {
		c := *pr
		c.Field = "agent"
		return &c
	}
	return err
}
