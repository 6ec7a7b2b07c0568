// Package events is jetway's public event contract in code: the NATS
// subjects, the CloudEvents that travel on them, how they are encoded and
// checked, and the texts a person and the model read for them. Other
// systems depend on it, so it changes only by adding.
//
// # Subjects
//
//	jetway.events.<tenant>.<session>      host events from people and other systems
//	jetway.jobevents.<tenant>.<session>   job exited/overdue, from jobs workers only
//	jetway.out.<tenant>.<session>         run output
//	jetway.notify.<tenant>.<session>      headlines for people
//	jetway.transcript.<tenant>.<session>  a session's recorded turns
//	jetway.schedules.<tenant>.<session>.<id>  a layover's message schedule (runners only)
//	jetway.fired.<tenant>.<session>       what a layover's schedule fires, read as jetway.events.…
//
// Tenant, session and schedule id are 1–64 of A-Z a-z 0-9 _ - (ValidateToken);
// anything else is refused with a *TokenError that names the field and the
// rule. Build subjects with EventsSubject and friends, read them with
// ParseSubject (which also accepts a work stream's `<n>.` partition prefix).
//
// # Events
//
// Every event is a CloudEvent 1.0 with datacontenttype application/json,
// source naming the publisher and subject `<tenant>/<session>`:
//
//	io.jetway.input        Input      {"text"}
//	io.jetway.job.exited   JobExited  {"id","program","exit_status","running_for_ms","tail","status"}
//	io.jetway.job.overdue  JobOverdue {"id","program","running_for_ms","tail"}
//	io.jetway.steer        Steer      {"note"}
//	io.jetway.resume       Resume     {"booked_by","waiting_for","booked_at","checks"}
//	anything else          External   type, source and data, never dropped
//
// A job event may also carry "task" and "seq" (TaskRef): a function task of
// the jobs service that reports more than once numbers its notices, and a
// newer one supersedes an older one not yet delivered.
//
// # Wire format
//
// New builds an event; Encode puts it on a NATS message in binary content
// mode (a ce- header per attribute, percent-encoded; Content-Type; the data
// as the body; Nats-Msg-Id = CE id for JetStream dedupe) and carries the
// caller's OpenTelemetry trace context as the traceparent/tracestate
// extensions. Decode accepts binary mode and structured mode (the event as
// JSON, with Content-Type application/cloudevents+json or none at all, data
// or data_base64), and returns a HostEvent or a typed error: *SizeError,
// *AttributeError (missing, invalid, wrong specversion, subject mismatch),
// *DataError (data that does not fit its type), ErrMalformed, or
// ErrForgedJobEvent for an io.jetway.job.* event on jetway.events.… — only
// jobs workers may publish job events, so a tenant cannot forge a job's end.
// Each matches one sentinel with errors.Is.
//
// # Texts
//
// Headline is the one line a person reads (`job 3 (gh) exited 0 after 21m`),
// Notice the text the model reads (`[background job notice] …`, with the
// job's last output and what to do), FmtElapsed the coarse duration both use
// (`45s`, `21m`, `1h05m`). Their wording for jobs is fixed (tests hold it word for word);
// a job that did not exit by itself (killed, timed_out, failed, lost) says
// so instead of showing an exit status. InputNotice, SteerNotice,
// ResumeNotice and ExternalNotice are the model's texts for a line typed
// mid-run, a steer, a layover firing while busy, and any other event type.
//
// Run output (io.jetway.run.*, on jetway.out.…) and headlines for people
// (io.jetway.headline, on jetway.notify.…) are CloudEvents too; their types
// are defined here as well and read with ReadEvent, not Decode, which
// accepts only the two host-event subjects.
package events
