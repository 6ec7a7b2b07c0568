package events

// TypeGroundStop is what a Ground Stop headline is about: an operator
// turned a session's Ground Stop switch on or off. It is not an event on the
// bus (the switch is a key in the control bucket); it names the headline's
// subject for webhook type filters.
const TypeGroundStop = "io.jetway.groundstop"

// GroundStopHeadline is the one-liner for a session's Ground Stop switch:
// `Ground Stop on: incident 42 (set by acme)` when it is turned on, with the
// reason and who set it when known, and `Ground Stop lifted` when it is
// turned off.
func GroundStopHeadline(on bool, reason, by string) string {
	if !on {
		return "Ground Stop lifted"
	}
	s := "Ground Stop on"
	if r := oneLine(reason, 200); r != "" {
		s += ": " + r
	}
	if b := oneLine(by, 80); b != "" {
		s += " (set by " + b + ")"
	}
	return s
}

// TypeJobsRebound is what a rebind headline is about: a session's jobs
// worker stopped answering and the session was bound to a live one. Like
// TypeGroundStop it is no event on the bus, it names the headline's
// subject.
const TypeJobsRebound = "io.jetway.jobs.rebound"

// JobsReboundHeadline is the one-liner for a session moved off a jobs
// worker that no longer answers:
// `jobs worker w1 does not answer: this session's jobs now run on w2 (jobs that ran on w1 are lost)`.
func JobsReboundHeadline(from, to string) string {
	from, to = oneLine(from, 64), oneLine(to, 64)
	return "jobs worker " + from + " does not answer: this session's jobs now run on " + to +
		" (jobs that ran on " + from + " are lost)"
}
