// Package bus connects jetway services to NATS and provisions the JetStream
// streams, consumers and key-value buckets they share.
//
// It owns the names of everything on the bus (streams, subject patterns,
// buckets, work consumers) so that services agree on them without importing
// each other. Subject builders for a single tenant/session live in
// pkg/events; this package only needs the patterns.
//
// Per-session order with horizontal scale comes from JETWAY_WORK: a
// work-queue stream sourcing JETWAY_EVENTS with a transform that puts a
// partition number first, hashing tenant and session (FNV-1a, see
// PartitionFor), so a session's events and job events share one of P
// partitions. Each partition has one durable pull consumer (work-<p>) with
// pinned priority, so one runner at a time consumes it.
//
// Measured here (nats-server 2.15.2, 3-node loopback cluster): when the node
// leading JETWAY_EVENTS stops, publishing resumes within a second or two, but
// sourcing into JETWAY_WORK stalls until the server's fixed 10 s source
// health check notices, and resumes 10-20 s after the failure. Nothing is
// lost; runners see those events late.
package bus

// Stream names.
const (
	// StreamEvents is the log of record for everything sent into sessions
	// (limits retention). It also holds message schedules (layovers, timers).
	StreamEvents = "JETWAY_EVENTS"
	// StreamWork is the work queue runners consume: JETWAY_EVENTS re-keyed by
	// partition so that one session's events stay in order on one consumer.
	StreamWork = "JETWAY_WORK"
	// StreamTranscripts holds each session's append-only transcript.
	StreamTranscripts = "JETWAY_TRANSCRIPTS"
	// StreamOut holds run output and headlines for a short while, so that a
	// terminal that reconnects can resume where it left off.
	StreamOut = "JETWAY_OUT"
)

// Subject patterns captured by the streams. The concrete subjects are
// <prefix>.<tenant>.<session> (schedules add .<id>).
const (
	SubjectEvents      = "jetway.events.>"
	SubjectJobEvents   = "jetway.jobevents.>"
	SubjectSchedules   = "jetway.schedules.>"
	SubjectTranscripts = "jetway.transcript.>"
	SubjectOut         = "jetway.out.>"
	SubjectNotify      = "jetway.notify.>"
)

// Key-value bucket names.
const (
	// BucketSessions holds one record per session (state, owning run, fence).
	BucketSessions = "jetway_sessions"
	// BucketJobs is the task table: one record per background job.
	BucketJobs = "jetway_jobs"
	// BucketWorkers binds a session to the jobs worker that owns its processes.
	BucketWorkers = "jetway_workers"
	// BucketRunners holds runner heartbeats; entries expire after the bucket
	// TTL so a dead runner disappears on its own.
	BucketRunners = "jetway_runners"
	// BucketControl holds operator switches such as Ground Stop, and layovers.
	BucketControl = "jetway_control"
)
