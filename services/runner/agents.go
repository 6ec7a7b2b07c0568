package runner

import (
	"context"
	"errors"
	"fmt"

	"jetway/pkg/control/agents"
)

// This file binds sessions to agent profiles (pkg/control/agents) and
// reads the profile a run goes by. A session is bound by the events that
// name an agent (the jetwayagent extension); the binding lives in its
// record, with the version its last run went by, so a recovered or
// steered run goes on as its run began while a new run takes the
// profile's current version.

// unknownAgentError refuses an event naming an agent its tenant does not
// have; the refusal (run.refused) names the agent.
type unknownAgentError struct{ tenant, name string }

func (e unknownAgentError) Error() string {
	return fmt.Sprintf("unknown agent %q: tenant %s has no agent profile of that name (jetway agents ls)", e.name, e.tenant)
}

// knownAgent reports whether the tenant has the profile name ("" and
// "default" always exist).
func (r *Runner) knownAgent(ctx context.Context, tenant, name string) (bool, error) {
	if name == "" || name == agents.DefaultName {
		return true, nil
	}
	_, err := agents.Get(ctx, r.profiles, tenant, name)
	switch {
	case errors.Is(err, agents.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// bindAgent applies a pending rebinding to rec and returns the profile the
// run act starts goes by, its name and version set in rec. A recovery or a
// steer of the same binding goes on with the version of the run before
// it; any other run takes the current version. A profile that is gone is
// an unknownAgentError.
func (a *actor) bindAgent(ctx context.Context, act act, rec *SessionRecord) (agents.Profile, error) {
	if a.rebind != "" && a.rebind != rec.Agent {
		rec.Agent, rec.AgentVersion = a.rebind, 0
	}
	name := rec.Agent
	if name == "" {
		name = agents.DefaultName
	}
	var prof agents.Profile
	var err error
	if (act == actRecover || act == actSteer) && rec.AgentVersion > 0 {
		prof, err = agents.GetVersion(ctx, a.r.profiles, a.tenant, name, rec.AgentVersion)
		if errors.Is(err, agents.ErrNotFound) {
			// Older than the bucket keeps: the current version, said so.
			a.log.Warn().Str("agent", name).Uint64("version", rec.AgentVersion).Msg("agent profile version no longer kept; the run takes the current one")
			prof, err = agents.Get(ctx, a.r.profiles, a.tenant, name)
		}
	} else {
		prof, err = agents.Get(ctx, a.r.profiles, a.tenant, name)
	}
	if errors.Is(err, agents.ErrNotFound) {
		return agents.Profile{}, unknownAgentError{tenant: a.tenant, name: name}
	}
	if err != nil {
		return agents.Profile{}, err
	}
	rec.AgentVersion = prof.Version
	return prof, nil
}
