package runner

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/pkg/events"
	"jetway/pkg/llm/llmtest"
)

// buildJetway returns the jetway binary the tests of every package share
// (testutil.Binary).
func buildJetway() (string, error) { return testutil.JetwayBuild() }

// runnerProc is a `jetway runner` process.
type runnerProc struct {
	id  string
	cmd *exec.Cmd
	out *strings.Builder
	mu  sync.Mutex
}

func startRunnerProc(t *testing.T, id, natsURLs, modelURL string) *runnerProc {
	t.Helper()
	bin, err := buildJetway()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "runner", "--nats", natsURLs, "--id", id, "--heartbeat", "300ms", "--log-format", "json", "--log-level", "info")
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL="+modelURL, "ANTHROPIC_MODEL=claude-test")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	rp := &runnerProc{id: id, cmd: cmd, out: &strings.Builder{}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			rp.mu.Lock()
			rp.out.WriteString(sc.Text() + "\n")
			rp.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			rp.mu.Lock()
			t.Logf("runner %s log:\n%s", id, rp.out.String())
			rp.mu.Unlock()
		}
	})
	return rp
}

// procBus builds the jetway binary and starts one NATS server with the bus
// provisioned (partitions work partitions), for tests of runner processes
// where clustering does not matter.
func procBus(t *testing.T, partitions int) (url string, js jetstream.JetStream) {
	t.Helper()
	if _, err := buildJetway(); err != nil {
		t.Fatal(err)
	}
	srv := bustest.StartServerWith(t, partitions)
	_, js = bustest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Partitions: partitions, WorkAckWait: 2 * time.Second, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), js
}

// signal sends sig to the runner process.
func (rp *runnerProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := rp.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// logged reports whether the runner's log holds text.
func (rp *runnerProc) logged(text string) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return strings.Contains(rp.out.String(), text)
}

func (rp *runnerProc) kill(t *testing.T) {
	t.Helper()
	if err := rp.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = rp.cmd.Wait()
}

// TestA_killed_runner_s_sessions_continue_elsewhere_exactly_once runs three
// runner processes on a 3-node cluster, SIGKILLs one in the middle of its
// runs, and checks from the transcripts that every event reached the model
// exactly once, in order per session, and that no two runs of a session
// were ever live together.
func TestA_killed_runner_s_sessions_continue_elsewhere_exactly_once(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	if _, err := buildJetway(); err != nil {
		t.Fatal(err)
	}
	cl := bustest.StartClusterWith(t, 3, bustest.ClusterConfig{Partitions: 6})
	urls := strings.Join(cl.URLs(), ",")
	_, js := bustest.Connect(t, urls)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bus.ProvisionConfig{Replicas: 3, Partitions: 6, Shards: 3, WorkAckWait: 2 * time.Second, WorkPinnedTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	model := llmtest.NewAnthropic(t)
	model.SetFallback(llmtest.Reply{Text: "noted", Latency: time.Second})

	procs := []*runnerProc{
		startRunnerProc(t, "ra", urls, model.URL()),
		startRunnerProc(t, "rb", urls, model.URL()),
		startRunnerProc(t, "rc", urls, model.URL()),
	}
	e := &env{t: t, js: js}
	const sessions, perSession = 12, 6
	sent := map[string][]string{} // session -> CE ids in publish order
	publishRound := func(round int) {
		for s := 0; s < sessions; s++ {
			name := fmt.Sprintf("s%02d", s)
			sent[name] = append(sent[name], e.publish(events.KindEvents, "t1", name, events.Input{Text: fmt.Sprintf("%s message %d", name, round)}))
		}
	}
	publishRound(0)
	publishRound(1)
	// Kill the runner that is driving a run right now.
	var victim *runnerProc
	testutil.Eventually(t, 30*time.Second, "a run in progress", func() bool {
		for _, p := range procs {
			for s := 0; s < sessions; s++ {
				rec := e.session("t1", fmt.Sprintf("s%02d", s))
				if rec.State == StateRunning && rec.Runner == p.id {
					victim = p
					return true
				}
			}
		}
		return false
	})

	victim.kill(t)
	t.Logf("killed runner %s mid-run", victim.id)
	for round := 2; round < perSession; round++ {
		publishRound(round)
	}

	testutil.EventuallyNil(t, 90*time.Second, "every event to reach the model", func() error {
		var missing []string
		for name, ids := range sent {
			got := deliveries(e.records("t1", name))
			n := 0
			for _, id := range ids {
				if got[id] == 0 {
					n++
				}
			}
			if n > 0 {
				rec := e.session("t1", name)
				missing = append(missing, fmt.Sprintf("%s: %d of %d events (record: %s, run %s on %s/%s, %q)", name, n, len(ids), rec.State, rec.Run, rec.Runner, rec.Incarnation, rec.Reason))
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return fmt.Errorf("not yet at the model: %s", strings.Join(missing, "; "))
		}
		return nil
	})

	for name, ids := range sent {
		recs := e.records("t1", name)
		got := deliveries(recs)
		for _, id := range ids {
			if got[id] != 1 {
				t.Errorf("%s: event %s delivered %d times", name, id, got[id])
			}
		}
		// Per-session order: the ids appear in the transcript in publish order.
		var order []string
		for _, r := range recs {
			if r.Message != nil {
				order = append(order, r.Message.Delivers...)
			}
		}
		if strings.Join(order, ",") != strings.Join(ids, ",") {
			t.Errorf("%s: delivered in order %v, published %v", name, order, ids)
		}
		// One live run at a time: once a run's records stop, they never
		// come back after another run's.
		finished := map[string]bool{}
		current := ""
		for _, r := range recs {
			if r.Run == "" || r.Run == current {
				continue
			}
			if finished[r.Run] {
				t.Errorf("%s: run %s wrote again after run %s started", name, r.Run, current)
			}
			if current != "" {
				finished[current] = true
			}
			current = r.Run
		}
	}
}
