package events

import "strings"

// Who or what an event comes from, as a person reads it beside the words
// it put in front of the model: a notice must not read as the person's own
// line.
const (
	FromPerson   = "person"    // a line a person typed (io.jetway.input)
	FromJob      = "job"       // a background job's end or news
	FromSubAgent = "sub-agent" // a sub-agent's progress or end
	FromParent   = "parent"    // the parent session's agent (agent_send)
	FromSteer    = "steer"     // a person's steer
	FromTimer    = "timer"     // a layover coming due (io.jetway.resume)
	FromOther    = "event"     // anything else: CI, webhooks, other systems
)

// From names who or what an event of type ceType comes from.
func From(ceType string) string {
	switch {
	case ceType == TypeInput:
		return FromPerson
	case ceType == TypeSteer:
		return FromSteer
	case ceType == TypeResume:
		return FromTimer
	case ceType == TypeAgentInput:
		return FromParent
	case ceType == TypeJobNotice || strings.HasPrefix(ceType, JobTypePrefix):
		return FromJob
	case strings.HasPrefix(ceType, AgentTypePrefix):
		return FromSubAgent
	}
	return FromOther
}
