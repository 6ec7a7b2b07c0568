package dispatcherapi

import "time"

// SubjectCluster reads the cluster's state (operators only): {} → Cluster.
const SubjectCluster = SubjectPrefix + ".cluster"

// Cluster answers GET /v1/cluster: who is doing the work right now. It is
// an operator's view and names no tenant's sessions.
type Cluster struct {
	// Time is when the dispatcher read it.
	Time time.Time `json:"time"`
	// Runners are the runners with a heartbeat in the runners bucket, by
	// id; a runner that stopped cleanly has left it, one that died ages
	// out of it.
	Runners []ClusterRunner `json:"runners"`
	// Partitions is one row per work partition: its consumer's backlog.
	Partitions []ClusterPartition `json:"partitions"`
	// JobsWorkers are the jobs workers that answered a discovery ping.
	JobsWorkers []ClusterJobsWorker `json:"jobs_workers"`
	// Streams and Consumers are jetway's streams and their durable
	// consumers, with what each has not yet handed out or had acked.
	Streams   []ClusterStream   `json:"streams"`
	Consumers []ClusterConsumer `json:"consumers"`
	// Errors says which part could not be read, in words; the rest is
	// still answered.
	Errors []string `json:"errors,omitempty"`
}

// ClusterRunner is one runner's last heartbeat.
type ClusterRunner struct {
	ID string `json:"id"`
	// Incarnation tells this process from an earlier one of the same id.
	Incarnation string `json:"incarnation,omitempty"`
	// Heartbeat is when its last heartbeat was stored; Stale is true when
	// that is longer ago than a live runner lets pass (see docs/CONSOLE.md).
	Heartbeat time.Time `json:"heartbeat"`
	Stale     bool      `json:"stale"`
	// Partitions are the work partitions it says it holds.
	Partitions []int `json:"partitions"`
}

// ClusterPartition is one work partition's consumer (work-<n>).
type ClusterPartition struct {
	Partition int `json:"partition"`
	// Pending are messages not yet handed to a runner (the lag);
	// AckPending those handed out and not yet acked (a busy session's
	// held notices among them); Redelivered those handed out again.
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
}

// ClusterJobsWorker is one jobs worker as its micro service describes
// itself, and how many sessions are bound to it.
type ClusterJobsWorker struct {
	ID          string `json:"id"`
	Version     string `json:"version,omitempty"`
	Confinement string `json:"confinement,omitempty"`
	Sessions    int    `json:"sessions"`
}

// ClusterStream is one of jetway's streams.
type ClusterStream struct {
	Name      string `json:"name"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	Consumers int    `json:"consumers"`
}

// ClusterConsumer is one durable consumer of a jetway stream.
type ClusterConsumer struct {
	Stream      string `json:"stream"`
	Name        string `json:"name"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting"`
}
