package invariant

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm"
	"jetway/services/runner"
)

func publishJSON(t *testing.T, js jetstream.JetStream, subject string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), subject, data); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

func TestCollect_reads_transcripts_session_records_refusals_and_jobs_from_JetStream(t *testing.T) {
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Session s1: a clean run. Session s2: an interrupted run refused with
	// a reason on the output, then moved on by a person.
	tr1, _ := events.TranscriptSubject("t1", "s1")
	tr2, _ := events.TranscriptSubject("t1", "s2")
	m1 := llm.UserText("hi")
	m1.Delivers = []string{"e1"}
	m2 := llm.UserText("there")
	m2.Delivers = []string{"e2"}
	m3 := llm.UserText("again")
	m3.Delivers = []string{"e3"}
	// Stamped by this process's clock, as a worker would, before every
	// record is stored: a start for any run, not after it.
	before := time.Now()
	for _, r := range []struct {
		subj string
		rec  runner.Record
	}{
		{tr1, runner.Record{Kind: runner.RecordRunStarted, Run: "r1", Cause: "dispatch"}},
		{tr2, runner.Record{Kind: runner.RecordRunStarted, Run: "r2", Cause: "dispatch"}},
		{tr1, runner.Record{Kind: runner.RecordMessage, Run: "r1", Message: &m1}},
		{tr2, runner.Record{Kind: runner.RecordMessage, Run: "r2", Message: &m2}},
		{tr1, runner.Record{Kind: runner.RecordRunEnded, Run: "r1", Reason: "completed"}},
		{tr2, runner.Record{Kind: runner.RecordRunStarted, Run: "r3", Cause: "steered"}},
		{tr2, runner.Record{Kind: runner.RecordMessage, Run: "r3", Message: &m3}},
		{tr2, runner.Record{Kind: runner.RecordRunEnded, Run: "r3", Reason: "completed"}},
	} {
		publishJSON(t, js, r.subj, r.rec)
	}
	// Output noise the checker must pass over, and the refusal it needs.
	out, _ := events.OutSubject("t1", "s2")
	for _, p := range []events.Payload{
		events.RunStarted{Run: "r2", Cause: "dispatch"},
		events.RunRefused{Reason: "run r2 was interrupted (lost contact) and not recovered: crash loop"},
	} {
		e, err := events.New("t1", "s2", "test", p)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := events.Encode(ctx, out, e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	sessions, err := js.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		data, _ := json.Marshal(runner.SessionRecord{Tenant: "t1", Session: s, State: runner.StateIdle})
		if _, err := sessions.Put(ctx, "t1."+s, data); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := js.KeyValue(ctx, bus.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	// Job 1 was started for r3 before anything was stored; job 2 for r2
	// after r3 wrote (now): the fenced-run check must find job 2 only, by
	// the stamps the stream gave the transcript's records.
	after := time.Now()
	for key, j := range map[string]Job{
		"t1.s2.1": {ID: "1", Session: "s2", Tenant: "t1", Status: "killed", Worker: "w1", Fence: "r3", Started: before},
		"t1.s2.2": {ID: "2", Session: "s2", Tenant: "t1", Status: "exited", Worker: "w1", Fence: "r2", Started: after},
	} {
		data, _ := json.Marshal(j)
		if _, err := jobs.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}

	accepted := map[Session][]string{{"t1", "s1"}: {"e1"}, {"t1", "s2"}: {"e2", "e3"}}
	ev, err := Collect(ctx, js, CollectConfig{Accepted: accepted, Jobs: true, WorkerPrefix: "invariant-test-nobody-"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ev.Transcripts[Session{"t1", "s1"}]); n != 3 {
		t.Errorf("s1 transcript has %d records, want 3", n)
	}
	if n := len(ev.Transcripts[Session{"t1", "s2"}]); n != 5 {
		t.Errorf("s2 transcript has %d records, want 5", n)
	}
	if r := ev.Refusals[Session{"t1", "s2"}]; len(r) != 1 {
		t.Errorf("s2 refusals %q, want one", r)
	}
	if len(ev.Sessions) != 2 || len(ev.Jobs) != 2 {
		t.Errorf("sessions %v, jobs %+v", ev.Sessions, ev.Jobs)
	}
	for _, j := range ev.Jobs {
		if j.Fence == "" || j.Started.IsZero() {
			t.Errorf("job %+v read without its fence or start", j)
		}
	}
	if st := ev.TranscriptStamps[Session{"t1", "s2"}]; len(st) != 5 || st[0].IsZero() {
		t.Errorf("s2 stamps %v, want one per record", st)
	}
	rep := Check(ev)
	f := rep.Failures()
	if rep.Passed() != 11 || len(f) != 1 || f[0].Invariant != NoFencedStart || !strings.Contains(f[0].Detail, "job 2 (t1.s2.2) was started for run r2") {
		t.Fatalf("want 11 passed and job 2 of r2 failed; got %d passed, failures %+v", rep.Passed(), f)
	}
}

func TestCollect_of_an_empty_system_finds_nothing_to_fail(t *testing.T) {
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := Collect(ctx, js, CollectConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if rep := Check(ev); len(rep.Results) != 0 {
		t.Fatalf("empty system produced checks: %+v", rep.Results)
	}
}

func TestScanProcs_finds_a_live_process_with_the_task_marker_and_not_after_it_ends(t *testing.T) {
	prefix := fmt.Sprintf("invariant-test-%d-", os.Getpid())
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), TaskMarkerEnv+"=task-under-test", WorkerMarkerEnv+"="+prefix+"w1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	procs, err := ScanProcs("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].PID != cmd.Process.Pid || procs[0].Marker != "task-under-test" {
		t.Fatalf("scan found %+v, want pid %d", procs, cmd.Process.Pid)
	}
	// Another worker's processes are not ours to count.
	if other, err := ScanProcs("", prefix+"someone-else"); err != nil || len(other) != 0 {
		t.Fatalf("scan with another prefix found %+v (%v)", other, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waited = true
	procs, err = ScanProcs("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 0 {
		t.Fatalf("scan still finds %+v after the process ended", procs)
	}
}

// A run that ends while the evidence is read must not look "never ended"
// beside an idle record: the record is read first, as a runner writes it
// last, or the checker reports a race of its own as a runner's fault. A
// run that starts during the read is another matter: the record read
// before it may say idle beside its start, which is why the chaos suite
// judges only a quiescent cluster (two equal reads); so each run here
// starts first.
func TestCollect_a_run_ending_during_the_read_never_looks_unended_beside_an_idle_record(t *testing.T) {
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sessions, err := js.KeyValue(ctx, bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := events.TranscriptSubject("t1", "s1")
	s := Session{"t1", "s1"}
	put := func(state, run string) {
		data, _ := json.Marshal(runner.SessionRecord{Tenant: "t1", Session: "s1", State: state, Run: run})
		if _, err := sessions.Put(ctx, "t1.s1", data); err != nil {
			t.Error(err)
		}
	}
	// A run, in the order a runner writes it: begin, then end.
	begin := func(i int) {
		id := fmt.Sprintf("r%d", i)
		m := llm.UserText("hi")
		m.Delivers = []string{fmt.Sprintf("e%d", i)}
		put(runner.StateRunning, id)
		publishJSON(t, js, subj, runner.Record{Kind: runner.RecordRunStarted, Run: id, Cause: "dispatch"})
		publishJSON(t, js, subj, runner.Record{Kind: runner.RecordMessage, Run: id, Message: &m})
	}
	end := func(i int) {
		id := fmt.Sprintf("r%d", i)
		publishJSON(t, js, subj, runner.Record{Kind: runner.RecordRunEnded, Run: id, Reason: "completed"})
		put(runner.StateIdle, id)
	}
	begin(0)
	end(0)
	idle := 0
	for i := 1; i <= 30; i++ {
		begin(i)
		done := make(chan struct{})
		go func() { defer close(done); end(i) }()
		ev, err := Collect(ctx, js, CollectConfig{})
		<-done
		if err != nil {
			t.Fatal(err)
		}
		rec := ev.Sessions[s]
		if rec.State != runner.StateIdle {
			continue // not quiescent: the checker is not asked
		}
		idle++
		if res := checkRecovery(s, ev.Transcripts[s], rec, nil); !res.OK {
			t.Fatalf("collect %d: %s", i, res.Detail)
		}
	}
	if idle == 0 {
		t.Fatal("no collect saw the session idle: the test checked nothing")
	}
}

// A reader that dies part-way (its consumer gone, as when its server
// restarts) is replaced by one that resumes after the last message read:
// every message once, in order, never a partial read.
func TestReadStream_reads_every_message_once_in_order_when_its_reader_is_lost(t *testing.T) {
	_, _, js := bustest.StartProvisioned(t, bus.ProvisionConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subj, _ := events.TranscriptSubject("t1", "s1")
	const n = 1500
	for i := range n {
		if _, err := js.PublishAsync(subj, []byte(fmt.Sprintf(`{"kind":"message","run":"r%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishes not acknowledged")
	}
	var seqs []uint64
	lost := 0
	err := readStream(ctx, js, bus.StreamTranscripts, events.Filter(events.KindTranscript), func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		seqs = append(seqs, md.Sequence.Stream)
		if len(seqs) == 600 || len(seqs) == 1100 {
			// Take the reader away from under it.
			st, err := js.Stream(ctx, bus.StreamTranscripts)
			if err != nil {
				return err
			}
			for name := range st.ConsumerNames(ctx).Name() {
				if err := st.DeleteConsumer(ctx, name); err == nil {
					lost++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lost < 2 {
		t.Fatalf("the reader was taken away %d times, want 2: the test did not test a resume", lost)
	}
	if len(seqs) != n {
		t.Fatalf("read %d messages, want %d", len(seqs), n)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("message %d has sequence %d after %d: out of order or twice", i, seqs[i], seqs[i-1])
		}
	}
}
