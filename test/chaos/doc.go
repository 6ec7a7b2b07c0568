// Package chaos is jetway's chaos suite: real `jetway runner` processes on a
// three-node in-process JetStream cluster take many sessions' events while
// the suite injects faults at random — runner SIGKILL, graceful restart
// and SIGSTOP, a runner's links to NATS blackholed, a NATS node stopped and
// restarted or partitioned from the other two, jobs workers killed and
// frozen — and afterwards the invariant
// checker (internal/invariant) proves from the transcripts that every
// accepted event reached the model exactly once, in order, with never two
// live runs of a session and every interruption recovered or refused with a
// reason.
//
// The faults and the events come from one seeded RNG whose seed is printed,
// so a failing schedule can be replayed (CHAOS_SEED); thread timing is not
// replayed, only what is done and when. CHAOS_DURATION sets how long faults
// are injected: by default a short run that fits inside `make test`, and
// `make chaos` runs ten minutes. See docs/CHAOS.md.
package chaos
