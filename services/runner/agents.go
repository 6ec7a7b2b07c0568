package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"jetway/pkg/agent/tool"
	"jetway/pkg/control/agents"
	"jetway/pkg/handover"
	"jetway/pkg/llm"
	"jetway/services/runner/internal/approvals"
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
	applyRebind(rec, a.rebind)
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
	} else if a.r.implicitDefault(a.tenant, name) {
		prof = agents.Default()
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

// implicitDefault reports, without a round trip, that name is the
// default profile and the tenant has stored none: the mirror of stored
// defaults is complete and has no key for it. A default stored a moment
// ago may not be there yet; its next run start sees it.
func (r *Runner) implicitDefault(tenant, name string) bool {
	m := r.defaults.Load()
	if name != agents.DefaultName || m == nil {
		return false
	}
	select {
	case <-m.Ready():
	default:
		return false
	}
	_, stored := m.Get(agents.Key(tenant, name))
	return !stored
}

// models caches the providers built for profiles' models: many agents,
// many providers, one runner. A provider is safe for concurrent runs; a
// failed build is not kept, so the next run tries again.
type models struct {
	mu    sync.Mutex
	built map[agents.Model]llm.Provider
}

// providerFor is the provider a run of prof calls: the runner's own when
// the profile names no model.
func (r *Runner) providerFor(prof agents.Profile) (llm.Provider, error) {
	m := prof.Model
	if m == (agents.Model{}) {
		return r.cfg.Provider, nil
	}
	r.models.mu.Lock()
	defer r.models.mu.Unlock()
	if p, ok := r.models.built[m]; ok {
		return p, nil
	}
	if r.cfg.ModelFor == nil {
		return nil, fmt.Errorf("agent %s names the model %s, and this runner serves only its own (%s)", prof.Name, m.Provider, r.cfg.Provider.Name())
	}
	p, err := r.cfg.ModelFor(m)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", prof.Name, err)
	}
	if r.models.built == nil {
		r.models.built = map[agents.Model]llm.Provider{}
	}
	r.models.built[m] = p
	return p, nil
}

// allowedTools keeps the tools prof allows (names or globs such as
// shell_job_*; absent: all). A tool left out is neither offered to the
// model nor run: a call of it finds no such tool.
func allowedTools(tools []tool.Tool, prof agents.Profile) []tool.Tool {
	allow := prof.Tools.Allow
	if allow == nil {
		return tools
	}
	var out []tool.Tool
	for _, t := range tools {
		name := t.Spec().Name
		for _, pattern := range allow {
			if ok, _ := path.Match(pattern, name); ok {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// runConfig is what a run takes from its agent profile, over the
// runner's own settings. It is built in one place, runConfigOf, so a run
// start reads one value instead of asking the profile, the runner's
// configuration and pkg/control/agents in turn.
type runConfig struct {
	prof     agents.Profile
	provider llm.Provider
	// system is the runner's system prompt, then the profile's
	// instructions.
	system        []string
	maxTurns      int
	maxDuration   time.Duration
	contextWindow int
	deny          []string
	// rails are the runner's with the profile's fuel and run cap where it
	// sets them.
	rails rails
	// recovery is the defaults with the profile's recovery policy; a
	// session's own override goes on top (recoveryFor).
	recovery handover.RecoverySettings
}

// runConfigOf is the configuration of a run of prof; an error when this
// runner cannot serve the model prof names.
func (r *Runner) runConfigOf(prof agents.Profile) (runConfig, error) {
	provider, err := r.providerFor(prof)
	if err != nil {
		return runConfig{}, err
	}
	rc := runConfig{prof: prof, provider: provider, system: r.cfg.System, rails: r.rails,
		maxTurns:      cmp.Or(prof.Limits.MaxTurns, r.cfg.MaxTurns),
		maxDuration:   cmp.Or(agents.MaxDuration(prof), r.cfg.MaxDuration),
		contextWindow: cmp.Or(prof.ContextWindow, r.cfg.ContextWindow),
		deny:          append(append(slices.Clip(r.cfg.Deny), prof.Tools.Deny...), approvals.Unheld(prof.Tools.Ask)...),
		recovery:      handover.DefaultRecoverySettings(),
	}
	if prof.Instructions != "" {
		rc.system = append(slices.Clip(rc.system), prof.Instructions)
	}
	if prof.Limits.Fuel > 0 {
		rc.rails.cfg.Fuel = prof.Limits.Fuel
	}
	if prof.Limits.RunsPerHour > 0 {
		rc.rails.cfg.RunsPerHour = prof.Limits.RunsPerHour
	}
	if pol, err := handover.ParseRecoveryPolicy(prof.Recovery); prof.Recovery != "" && err == nil {
		rc.recovery.Policy = pol
	}
	return rc, nil
}

// recoveryFor is the run's recovery settings with the session's own
// override applied.
func (rc runConfig) recoveryFor(rec SessionRecord) handover.RecoverySettings {
	if rec.Policy != nil {
		return rc.recovery.With(*rec.Policy)
	}
	return rc.recovery
}

// MaxInstructionBytes caps each workspace instruction file a run start
// sends: it is in every request of the run.
const MaxInstructionBytes = 32 << 10

// Instructions is a workspace instruction file as ReadInstructions found
// it: its text (at most the cap), whether there is one, whether it was cut.
type Instructions struct {
	Text       string
	Found, Cut bool
}

// instructionBlocks are the system blocks of prof's workspace instruction
// files, one each, sent after the instructions: a separate block, so the
// instructions before it stay a cacheable prefix. The implicit default
// profile reads none, as the runner never did; a file that is absent or
// cannot be read is left out (the latter logged).
func (r *Runner) instructionBlocks(ctx context.Context, ref SessionRef, prof agents.Profile) []string {
	if r.cfg.ReadInstructions == nil || prof.Version == 0 {
		return nil
	}
	var blocks []string
	for _, file := range agents.InstructionFiles(prof) {
		f, err := r.cfg.ReadInstructions(ctx, ref, file, MaxInstructionBytes)
		if err != nil {
			r.log.Warn().Err(err).Str("tenant", ref.Tenant).Str("session", ref.Session).Str("file", file).Msg("read workspace instructions")
			continue
		}
		if !f.Found || strings.TrimSpace(f.Text) == "" {
			continue
		}
		blocks = append(blocks, instructionBlock(file, f))
	}
	return blocks
}

func instructionBlock(file string, f Instructions) string {
	s := fmt.Sprintf("Instructions from the workspace file %s:\n\n%s", file, strings.TrimRight(f.Text, "\n"))
	if f.Cut {
		s += fmt.Sprintf("\n\n[%s is longer than a run start sends (%d bytes at most): this is its beginning. Read the rest with read_file when you need it.]", file, MaxInstructionBytes)
	}
	return s
}

// applyRebind binds rec to the agent a pending rebinding names — the
// actor's (rebind), else the one kept in the record (NextAgent) — and
// clears the record's: a claim or a run's end writes the binding itself.
func applyRebind(rec *SessionRecord, rebind string) {
	if rebind == "" {
		rebind = rec.NextAgent
	}
	rec.NextAgent = ""
	if rebind != "" && rebind != rec.Agent {
		rec.Agent, rec.AgentVersion = rebind, 0
	}
}

// keepRebind writes a rebinding taken during live run lr into the session
// record (NextAgent), so it outlives this runner: held only in memory, it
// was lost when the runner died before the run's end, and the session
// went on with its old profile. A write that fails leaves it in memory,
// as before; a record that no longer names the run is another runner's,
// and the rebinding is its event to apply — this runner's run is over.
func keepRebind(ctx context.Context, a *actor, lr *liveRun, agent string) {
	rec, rev, _, err := a.record.get(ctx)
	if err != nil || rec.Run != lr.id || rec.NextAgent == agent {
		return
	}
	rec.NextAgent = agent
	if _, err := a.record.put(ctx, rec, rev); err != nil {
		a.log.Warn().Err(err).Str("agent", agent).Msg("keep a rebinding in the session record")
	}
}
