package dispatcher

import (
	"encoding/json"

	api "jetway/pkg/dispatcherapi"
)

// The request and answer bodies live in pkg/dispatcherapi, the wire
// contract the client imports; these names keep the package's own code and
// its callers short.
type (
	Accepted      = api.Accepted
	InputRequest  = api.InputRequest
	SteerRequest  = api.SteerRequest
	SessionInfo   = api.SessionInfo
	JobInfo       = api.JobInfo
	StopState     = api.StopState
	StopSwitch    = api.StopSwitch
	StopRequest   = api.StopRequest
	BatchAccepted = api.BatchAccepted
	SessionList   = api.SessionList
	JobList       = api.JobList
)

// asJSON passes a stored value through when it is JSON, and quotes it as a
// JSON string when it is not.
func asJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(string(b))
	return q
}
