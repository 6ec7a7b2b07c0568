package handover

import (
	"encoding/json"
	"fmt"
	"time"
)

// CauseKind says why a run is being started.
type CauseKind int

// The causes of a run. CauseDispatch is the zero value because it is the
// ordinary case, and an ordinary run is told nothing extra.
const (
	// CauseDispatch: input arrived in the ordinary way.
	CauseDispatch CauseKind = iota
	// CauseRecovered: an earlier run was interrupted and the work restarts.
	CauseRecovered
	// CauseSteered: a person redirected an earlier run.
	CauseSteered
	// CauseResumed: work an earlier run set down on purpose is picked up.
	CauseResumed
)

var causeNames = []string{
	CauseDispatch:  "dispatch",
	CauseRecovered: "recovered",
	CauseSteered:   "steered",
	CauseResumed:   "resumed",
}

// String returns the kind's stored name, such as "steered".
func (k CauseKind) String() string { return stringEnum("CauseKind", causeNames, k) }

// MarshalText stores the kind as its lowercase name.
func (k CauseKind) MarshalText() ([]byte, error) {
	return marshalEnum("cause kind", causeNames, k)
}

// UnmarshalText reads a stored name and refuses any other.
func (k *CauseKind) UnmarshalText(text []byte) error {
	v, err := parseEnum[CauseKind]("cause kind", causeNames, string(text))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Recovery is a restart of work that was interrupted.
type Recovery struct {
	// Previous is the id of the run that did not finish.
	Previous string `json:"previous"`
	// Interruption is what happened to it.
	Interruption Interruption `json:"interruption"`
	// Attempt is which attempt this is. The first restart is attempt 2.
	Attempt int `json:"attempt"`
}

// Steer is a person redirecting work that is already under way.
type Steer struct {
	// Previous is the id of the run being redirected.
	Previous string `json:"previous"`
	// Note is what the person said to do differently.
	Note string `json:"note"`
	// At is when they said it.
	At time.Time `json:"at"`
}

// Resumption is work being picked up after a deliberate wait (a layover).
// Its JSON is the data of an io.jetway.resume event.
type Resumption struct {
	// BookedBy is the chain that set the work down.
	BookedBy string `json:"booked_by"`
	// WaitingFor is what the earlier run said it was waiting for.
	WaitingFor string `json:"waiting_for"`
	// BookedAt is when it was set down.
	BookedAt time.Time `json:"booked_at"`
	// Checks is how many times it has been picked up and found nothing yet.
	// The agent is told, because it changes what a reasonable response is:
	// nothing on the first check is normal; nothing on the twelfth is worth
	// saying out loud rather than quietly booking a thirteenth.
	Checks int `json:"checks"`
}

// Cause is why a run is being started: a kind, and the details that kind
// carries. Exactly the field named by Kind is set; dispatch carries none.
type Cause struct {
	Kind       CauseKind   `json:"kind"`
	Recovery   *Recovery   `json:"recovery,omitempty"`
	Steer      *Steer      `json:"steer,omitempty"`
	Resumption *Resumption `json:"resumption,omitempty"`
}

// RepeatsEarlierWork reports whether this run repeats work an earlier one may
// have partly done — so something already done may need checking before it is
// done again, and a side effect already applied must not be applied twice.
//
// A resumed layover deliberately does not: the earlier run set the work down
// on purpose and ended cleanly, so telling this one to look for half-applied
// side effects would send it looking for something that is not there.
func (c Cause) RepeatsEarlierWork() bool {
	return c.Kind == CauseRecovered || c.Kind == CauseSteered
}

// Validate reports whether the cause is well formed: a known kind, with
// exactly the details that kind needs.
func (c Cause) Validate() error {
	if enumName(causeNames, c.Kind) == "" {
		return fmt.Errorf("handover: cause has no known kind (%d)", int(c.Kind))
	}
	details := []struct {
		kind CauseKind
		set  bool
	}{
		{CauseRecovered, c.Recovery != nil},
		{CauseSteered, c.Steer != nil},
		{CauseResumed, c.Resumption != nil},
	}
	for _, d := range details {
		if d.kind == c.Kind && !d.set {
			return fmt.Errorf("handover: %s cause is missing its %s", c.Kind, detailName(d.kind))
		}
		if d.kind != c.Kind && d.set {
			return fmt.Errorf("handover: %s cause also carries a %s", c.Kind, detailName(d.kind))
		}
	}
	if c.Recovery != nil {
		if err := c.Recovery.Interruption.Validate(); err != nil {
			return fmt.Errorf("handover: recovered cause: %w", err)
		}
	}
	return nil
}

func detailName(k CauseKind) string {
	switch k {
	case CauseRecovered:
		return "recovery"
	case CauseSteered:
		return "steer"
	case CauseResumed:
		return "resumption"
	}
	return k.String()
}

// MarshalJSON refuses a cause that [Cause.Validate] refuses.
func (c Cause) MarshalJSON() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	type plain Cause
	return json.Marshal(plain(c))
}

// UnmarshalJSON reads a cause and refuses one that [Cause.Validate] refuses,
// so a corrupt record fails where it is read.
func (c *Cause) UnmarshalJSON(data []byte) error {
	type plain Cause
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("handover: reading cause: %w", err)
	}
	if err := Cause(p).Validate(); err != nil {
		return err
	}
	*c = Cause(p)
	return nil
}
