package invariant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/events"
	"jetway/services/runner"
)

// CollectConfig says what to gather besides the transcripts and session
// records, which are always read whole.
type CollectConfig struct {
	// Accepted is the caller's list of accepted events per session, in
	// publish order; it is copied into the Evidence as is.
	Accepted map[Session][]string
	// Jobs reads the jobs table and scans /proc for job processes.
	Jobs bool
	// ProcRoot is where the process table is mounted (default /proc).
	ProcRoot string
	// WorkerPrefix keeps only processes whose JETWAY_JOBS_WORKER marker
	// starts with it, so jobs of other tests on the same machine are not
	// counted; empty keeps every process with a task marker.
	WorkerPrefix string
}

// Collect reads the evidence from JetStream (and /proc): every record in
// the sessions bucket, every transcript in JETWAY_TRANSCRIPTS, the run
// refusals in JETWAY_OUT, and, with cfg.Jobs, the jobs table and the
// surviving job processes.
//
// The records are read before the transcripts, in the order a runner
// writes them: a run's end goes into the transcript before the record says
// idle. Read the other way round, a run that ended between the two reads
// would show as "never ended" beside an idle record: a violation of the
// checker's making, not the runner's.
func Collect(ctx context.Context, js jetstream.JetStream, cfg CollectConfig) (Evidence, error) {
	ev := Evidence{
		Accepted:         cfg.Accepted,
		Transcripts:      map[Session][]runner.Record{},
		TranscriptStamps: map[Session][]time.Time{},
		Sessions:         map[Session]runner.SessionRecord{},
		Refusals:         map[Session][]string{},
		JobsInPlay:       cfg.Jobs,
	}
	err := readBucket(ctx, js, bus.BucketSessions, func(key string, v []byte) error {
		var rec runner.SessionRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("session record %s: %w", key, err)
		}
		ev.Sessions[Session{Tenant: rec.Tenant, Session: rec.Session}] = rec
		return nil
	})
	if err != nil {
		return ev, err
	}
	if cfg.Jobs {
		err = readBucket(ctx, js, bus.BucketJobs, func(key string, v []byte) error {
			j := Job{Key: key}
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("job record %s: %w", key, err)
			}
			ev.Jobs = append(ev.Jobs, j)
			return nil
		})
		if err != nil {
			return ev, err
		}
	}
	err = readStream(ctx, js, bus.StreamTranscripts, events.Filter(events.KindTranscript), func(m jetstream.Msg) error {
		s, err := sessionOf(m.Subject())
		if err != nil {
			return err
		}
		var r runner.Record
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			return fmt.Errorf("transcript %s: record: %w", m.Subject(), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("transcript %s: metadata: %w", m.Subject(), err)
		}
		ev.Transcripts[s] = append(ev.Transcripts[s], r)
		ev.TranscriptStamps[s] = append(ev.TranscriptStamps[s], md.Timestamp)
		return nil
	})
	if err != nil {
		return ev, err
	}
	err = readStream(ctx, js, bus.StreamOut, events.Filter(events.KindOut), func(m jetstream.Msg) error {
		if m.Headers().Get(events.HeaderPrefix+"type") != events.TypeRunRefused {
			return nil
		}
		s, err := sessionOf(m.Subject())
		if err != nil {
			return err
		}
		e, err := events.ReadEvent(m.Headers(), m.Data())
		if err != nil {
			return fmt.Errorf("output %s: %w", m.Subject(), err)
		}
		var rr events.RunRefused
		if err := json.Unmarshal(e.Data(), &rr); err != nil {
			return fmt.Errorf("output %s: run refused: %w", m.Subject(), err)
		}
		ev.Refusals[s] = append(ev.Refusals[s], rr.Reason)
		return nil
	})
	if err != nil {
		return ev, err
	}
	if !cfg.Jobs {
		return ev, nil
	}
	ev.Procs, err = ScanProcs(cfg.ProcRoot, cfg.WorkerPrefix)
	return ev, err
}

// sessionOf reads the tenant and session from a jetway subject.
func sessionOf(subject string) (Session, error) {
	sub, err := events.ParseSubject(subject)
	if err != nil {
		return Session{}, fmt.Errorf("subject %q: %w", subject, err)
	}
	return Session{Tenant: sub.Tenant, Session: sub.Session}, nil
}

// readStream hands every message of stream on filter to fn, in stream
// order: as many as the stream leader counted when the read began.
//
// The count, not the reader's NumPending, says when to stop. A reader is
// an R1 consumer the server places on any replica of the stream, and a
// replica that lags the leader (one catching up after a restart, or just
// slow on a loaded machine) reports nothing pending while it still lacks
// the newest messages.
func readStream(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(jetstream.Msg) error) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("read %s: info: %w", stream, err)
	}
	// With a subject filter the server lists the matching subjects and
	// their counts: none means there is nothing to read.
	want := uint64(0)
	for _, n := range info.State.Subjects {
		want += n
	}
	if want == 0 {
		return nil
	}
	// A reader that fails part-way (its server restarted, or it was placed
	// on a replica still catching up after many restarts) is replaced by
	// one that starts after the last message read, until the context ends:
	// a partial read would be evidence of nothing.
	r := reader{js: js, stream: stream, filter: filter, want: want, fn: fn}
	for {
		err := r.read(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, errHandler) {
			return r.failed
		}
		if ctx.Err() != nil {
			return fmt.Errorf("read %s: %d of %d messages: %w", stream, r.got, want, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// errHandler marks an error of the caller's fn: it ends the read at once.
var errHandler = errors.New("handler")

// reader reads a stream's messages on a filter with an ordered consumer,
// resuming after the last one read when it is made again.
type reader struct {
	js             jetstream.JetStream
	stream, filter string
	want, got      uint64
	next           uint64 // stream sequence to resume from; 0: the start
	fn             func(jetstream.Msg) error
	failed         error // fn's error, which ends the read
}

func (r *reader) read(ctx context.Context) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.filter}}
	if r.next > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.next
	}
	cons, err := r.js.OrderedConsumer(ctx, r.stream, cfg)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer func() {
		// Collect runs every second while a chaos run waits for
		// quiescence: leave no reader behind for the server to expire.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = r.js.DeleteConsumer(dctx, r.stream, cons.CachedInfo().Name)
	}()
	for r.got < r.want {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(int(min(r.want-r.got, 512)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("metadata: %w", err)
			}
			if err := r.fn(m); err != nil {
				r.failed = err
				return errHandler
			}
			r.got, r.next = r.got+1, md.Sequence.Stream+1
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
	}
	return nil
}

// readBucket hands every live key of a bucket to fn.
func readBucket(ctx context.Context, js jetstream.JetStream, bucket string, fn func(key string, v []byte) error) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("bucket %s: list: %w", bucket, err)
	}
	var list []string
	for k := range keys.Keys() {
		list = append(list, k)
	}
	for _, k := range list {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			return fmt.Errorf("bucket %s: %s: %w", bucket, k, err)
		}
		if err := fn(k, e.Value()); err != nil {
			return err
		}
	}
	return nil
}

// Environment markers of job processes (pkg/tasks/proctree.MarkerEnv and
// services/jobs.WorkerEnv), spelled out so the checker reads the process
// table without importing what it checks.
const (
	TaskMarkerEnv   = "JETWAY_TASK"
	WorkerMarkerEnv = "JETWAY_JOBS_WORKER"
)

// ScanProcs lists the live processes under procRoot (default /proc) whose
// environment carries the task marker, keeping only those whose worker
// marker starts with workerPrefix when it is set. Processes that vanish or
// cannot be read during the scan are passed over; zombies are not alive.
func ScanProcs(procRoot, workerPrefix string) ([]Proc, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", procRoot, err)
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil {
			continue
		}
		var p Proc
		for _, kv := range strings.Split(string(env), "\x00") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case TaskMarkerEnv:
				p.Marker = v
			case WorkerMarkerEnv:
				p.Worker = v
			}
		}
		if p.Marker == "" || (workerPrefix != "" && !strings.HasPrefix(p.Worker, workerPrefix)) {
			continue
		}
		if zombie(dir) {
			continue
		}
		p.PID = pid
		if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
			p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		}
		out = append(out, p)
	}
	return out, nil
}

// zombie reports whether the process in dir has exited and waits to be
// reaped (state Z or X in /proc/<pid>/stat).
func zombie(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return true // gone
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] == 'Z' || s[i+2] == 'X'
}
