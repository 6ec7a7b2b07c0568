package dispatcher

import (
	"net/http"

	"jetway/pkg/auth"
	api "jetway/pkg/dispatcherapi"
)

// The HTTP routes' operations (httpOp): each reads its path, query and
// body into one call of a core; serve (http.go) does the rest.

func (d *httpAPI) handleInput(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	var req InputRequest
	if err := d.decodeJSON(w, r, &req, false); err != nil {
		return nil, err
	}
	return d.events.Input(r.Context(), p, r.PathValue("session"), req)
}

func (d *httpAPI) handleSteer(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	var req SteerRequest
	if err := d.decodeJSON(w, r, &req, false); err != nil {
		return nil, err
	}
	return d.events.Steer(r.Context(), p, r.PathValue("session"), req)
}

func (d *httpAPI) handleResume(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	var req ResumeRequest
	if err := d.decodeJSON(w, r, &req, true); err != nil {
		return nil, err
	}
	return d.events.Resume(r.Context(), p, r.PathValue("session"), req)
}

// handleEvents is the CloudEvents HTTP binding: binary mode (ce-* headers),
// structured mode (application/cloudevents+json) and batch mode
// (application/cloudevents-batch+json), read by the SDK itself (cehttp.go).
// Every event of a batch is checked before the first is published, so a
// batch is refused whole rather than half published.
func (d *httpAPI) handleEvents(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	body, err := d.readBody(w, r)
	if err != nil {
		return nil, err
	}
	evs, batch, err := readCloudEvents(r.Header, body)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if err := d.events.checkEvent(r.Context(), p, e); err != nil {
			return nil, err
		}
	}
	out := make([]Accepted, 0, len(evs))
	for _, e := range evs {
		acc, err := d.events.PublishEvent(r.Context(), p, e)
		if err != nil {
			return nil, err
		}
		out = append(out, acc)
	}
	if batch {
		return BatchAccepted{Events: out}, nil
	}
	return out[0], nil
}

func (d *httpAPI) handleSessions(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	ss, err := d.sessions.Sessions(r.Context(), p)
	if err != nil {
		return nil, err
	}
	return SessionList{Sessions: ss}, nil
}

// handleSession answers GET /v1/sessions/{session} with the detail.
func (d *httpAPI) handleSession(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	return d.sessions.SessionDetail(r.Context(), p, r.PathValue("session"))
}

func (d *httpAPI) handleLayovers(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	ls, err := d.sessions.Layovers(r.Context(), p, r.PathValue("session"))
	if err != nil {
		return nil, err
	}
	return LayoverList{Layovers: ls}, nil
}

func (d *httpAPI) handleCancelLayover(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	ok, err := d.sessions.CancelLayover(r.Context(), p, r.PathValue("session"))
	if err != nil {
		return nil, err
	}
	return api.LayoverCancelled{Cancelled: ok}, nil
}

func (d *httpAPI) handleApprovals(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	as, err := d.approvals.Approvals(r.Context(), p, r.PathValue("session"))
	if err != nil {
		return nil, err
	}
	return ApprovalList{Approvals: as}, nil
}

func (d *httpAPI) handleDecide(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	req, err := strictBody(d, w, r, decodeDecisionRequest)
	if err != nil {
		return nil, err
	}
	return d.approvals.Decide(r.Context(), p, r.PathValue("session"), r.PathValue("id"), req)
}

func (d *httpAPI) handleRecovery(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	session := r.PathValue("session")
	switch r.Method {
	case http.MethodPut:
		req, err := strictBody(d, w, r, decodeRecoveryRequest)
		if err != nil {
			return nil, err
		}
		return d.sessions.SetRecovery(r.Context(), p, session, req)
	case http.MethodDelete:
		return d.sessions.ClearRecovery(r.Context(), p, session)
	}
	return d.sessions.Recovery(r.Context(), p, session)
}

func (d *httpAPI) handleTranscript(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	after, limit, err := pageParams(r)
	if err != nil {
		return nil, err
	}
	return d.sessions.Transcript(r.Context(), p, r.PathValue("session"), after, limit)
}

func (d *httpAPI) handleJobs(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	jobs, err := d.jobs.Jobs(r.Context(), p, r.PathValue("session"))
	if err != nil {
		return nil, err
	}
	return JobList{Jobs: jobs}, nil
}

func (d *httpAPI) handleJobOutput(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	req, err := jobOutputParams(r)
	if err != nil {
		return nil, err
	}
	return d.jobs.JobOutput(r.Context(), p, r.PathValue("session"), r.PathValue("id"), req)
}

func (d *httpAPI) handleKillJob(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	return d.jobs.KillJob(r.Context(), p, r.PathValue("session"), r.PathValue("id"))
}

func (d *httpAPI) handleAgents(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	return d.agents.Agents(r.Context(), p)
}

func (d *httpAPI) handleAgent(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	name := r.PathValue("name")
	switch r.Method {
	case http.MethodPut:
		a, err := strictBody(d, w, r, decodeAgent)
		if err != nil {
			return nil, err
		}
		return d.agents.PutAgent(r.Context(), p, name, a)
	case http.MethodDelete:
		return d.agents.DeleteAgent(r.Context(), p, name)
	}
	return d.agents.Agent(r.Context(), p, name)
}

func (d *httpAPI) handleStop(w http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	q := r.URL.Query()
	t := StopTarget{Scope: q.Get("scope"), Tenant: q.Get("tenant"), Session: q.Get("session")}
	switch r.Method {
	case http.MethodPost:
		var req StopRequest
		if err := d.decodeJSON(w, r, &req, true); err != nil {
			return nil, err
		}
		return d.groundStop.SetStop(r.Context(), p, t, req)
	case http.MethodDelete:
		return d.groundStop.ClearStop(r.Context(), p, t)
	}
	return d.groundStop.Stop(r.Context(), p, t)
}

// handleCluster answers GET /v1/cluster. An operator token needs no
// tenant here, as for Ground Stop (principal).
func (d *httpAPI) handleCluster(_ http.ResponseWriter, r *http.Request, p auth.Principal) (any, error) {
	return d.cluster.Cluster(r.Context(), p)
}

// strictBody reads the body under the size limit and decodes it with
// decode: a PUT route's own strict reader, which refuses unknown fields
// rather than read a misspelt one as absent.
func strictBody[T any](d *httpAPI, w http.ResponseWriter, r *http.Request, decode func([]byte) (T, error)) (T, error) {
	b, err := d.readBody(w, r)
	if err != nil {
		var zero T
		return zero, err
	}
	return decode(b)
}
