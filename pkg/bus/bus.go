// Package bus connects jetway services to NATS and provisions the JetStream
// streams, consumers and key-value buckets they share.
//
// It owns the names of everything on the bus (streams, subject patterns,
// buckets, work consumers) so that services agree on them without importing
// each other. Subject builders for a single tenant/session live in
// pkg/events; this package only needs the patterns.
//
// Who may write what is the stream layout (docs/SECURITY.md): JetStream
// features such as message schedules, roll-ups and deduplication act on a
// whole stream whatever the publisher's subject permissions say, so each
// stream's settings fit the least trusted of its writers. JETWAY_EVENTS,
// which tenants write, allows none of them; job events and layover
// schedules have their own streams, written only by the jobs workers and
// the runners, and are sourced into JETWAY_EVENTS, which stays the one log
// of record every session's events are read from.
//
// Per-session order with horizontal scale comes from the work shards
// (layout.go): the server's mapping puts a partition number into every
// event's subject as it is published, hashing tenant and session (FNV-1a,
// see PartitionFor), so a session's events and job events share one of P
// partitions, and partition p's events land in shard p mod K. Each
// partition has one durable pull consumer (work-<p>) on its shard with
// pinned priority, so one runner at a time consumes it.
package bus

// Stream names.
const (
	// StreamEvents is the log of record for everything sent into sessions
	// (limits retention), as jetway.<kind>.<tenant>.<session>. It takes no
	// publishes itself: it sources the work shards (JETWAY_WORK_<k>), which
	// tenants, the dispatcher and other systems publish into, and which
	// source job events, sub-agent events and fired layovers. Because
	// tenants write them, the shards and the log allow no schedules,
	// roll-ups, purges or deletes, and have no dedupe window (a stream with
	// sources gets none): a Nats-Msg-Id there can neither occupy nor
	// collide with another tenant's id.
	StreamEvents = "JETWAY_EVENTS"
	// StreamJobEvents holds job exits and overdue notices on
	// jetway.jobevents.>. Only the jobs workers may publish there, so its
	// dedupe window (for the jobs outbox's retries) is theirs alone.
	StreamJobEvents = "JETWAY_JOBEVENTS"
	// StreamSchedules holds layover schedule holders (jetway.schedules.>)
	// and what they fire (jetway.fired.>: a schedule's target must be in
	// its own stream). Only runners write it, so it is the one stream that
	// allows message schedules (and with them, as the server insists,
	// roll-ups and purges: cancelling a layover purges its holder).
	StreamSchedules = "JETWAY_SCHEDULES"
	// StreamAgentEvents holds sub-agent events on jetway.agentevents.>: a
	// parent's work for its child, a child's end for its parent. Only
	// runners may publish there, so its dedupe window (a child's end has
	// an id made from its run) is theirs alone.
	StreamAgentEvents = "JETWAY_AGENTEVENTS"
	// StreamEventsV1 is where an upgrade keeps the log of a deployment made
	// before the streams were split (see UpgradeEvents); it ages out after
	// EventsMaxAge.
	StreamEventsV1 = "JETWAY_EVENTS_V1"
	// StreamTranscripts holds each session's append-only transcript.
	StreamTranscripts = "JETWAY_TRANSCRIPTS"
	// StreamOut holds run output and headlines for a short while, so that a
	// terminal that reconnects can resume where it left off.
	StreamOut = "JETWAY_OUT"
)

// Subject patterns captured by the streams. The concrete subjects are
// <prefix>.<tenant>.<session> (schedules add .<id>).
const (
	SubjectEvents    = "jetway.events.>"
	SubjectJobEvents = "jetway.jobevents.>"
	SubjectSchedules = "jetway.schedules.>"
	// SubjectAgentEvents carries sub-agent events (runners only).
	SubjectAgentEvents = "jetway.agentevents.>"
	// SubjectFired is where a layover's schedule stores the resume it fires
	// (jetway.fired.<tenant>.<session>); JETWAY_EVENTS sources it as
	// jetway.events.<tenant>.<session>. No user publishes here: the server
	// writes it when a schedule fires.
	SubjectFired       = "jetway.fired.>"
	SubjectTranscripts = "jetway.transcript.>"
	SubjectOut         = "jetway.out.>"
	SubjectNotify      = "jetway.notify.>"
)

// Key-value bucket names.
const (
	// BucketSessions holds one record per session (state, owning run, fence).
	BucketSessions = "jetway_sessions"
	// StreamSessions is the stream behind BucketSessions, by the key-value
	// store's naming.
	StreamSessions = "KV_" + BucketSessions
	// BucketSessionsByPartition is the server's copy of BucketSessions,
	// each record under its session's partition (SessionsByPartitionKey),
	// so a runner watches the records of the partitions it holds and hears
	// nothing of the others' runs. Nothing but the copy writes it.
	BucketSessionsByPartition = "jetway_sessions_by_partition"
	// StreamSessionsByPartition is the stream behind it.
	StreamSessionsByPartition = "KV_" + BucketSessionsByPartition
	// BucketJobs is the task table: one record per background job.
	BucketJobs = "jetway_jobs"
	// BucketWorkers binds a session to the jobs worker that owns its processes.
	BucketWorkers = "jetway_workers"
	// BucketRunners holds runner heartbeats; entries expire after the bucket
	// TTL so a dead runner disappears on its own.
	BucketRunners = "jetway_runners"
	// BucketControl holds operator switches such as Ground Stop, and layovers.
	BucketControl = "jetway_control"
	// BucketEventIDs remembers, for the duplicate window, the CE ids the
	// dispatcher accepted with a caller-chosen id, keyed by tenant, session
	// and a hash of the id: a retried request is answered as a duplicate,
	// and the same id in another tenant or session is a different event.
	BucketEventIDs = "jetway_event_ids"
	// BucketAgents holds the tenants' agent profiles, keyed
	// <tenant>.<name>; a key's revision is the profile's version. Only the
	// dispatcher writes it; runners read the version a run started with.
	BucketAgents = "jetway_agents"
)
