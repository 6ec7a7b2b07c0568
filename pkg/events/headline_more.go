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
