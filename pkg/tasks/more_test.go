package tasks

import (
	"context"
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"jetway/internal/testutil"
)

func TestFunction_task_that_ignores_cancel_is_let_go_after_the_grace(t *testing.T) {
	m := newManager(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	info := start(t, m, Spec{Run: func(ctx context.Context, out io.Writer, r Reporter) (int, error) {
		<-release
		return 0, nil
	}})
	end, err := m.Kill(sid, info.ID)
	if err != nil || end.Status != Killed || !strings.Contains(end.Error, "grace period") {
		t.Errorf("Kill = %+v, %v", end, err)
	}
}

func TestWait_on_an_ended_task_returns_its_last_unseen_report(t *testing.T) {
	m := newManager(t)
	info := start(t, m, Spec{Kind: "watch", Run: func(ctx context.Context, out io.Writer, r Reporter) (int, error) {
		r.Notify("tests now pass")
		return 0, nil
	}})
	// The end notice replaced the report; a Wait still tells it.
	testutil.Eventually(t, 10*time.Second, "the end", func() bool { i, _ := m.Get(sid, info.ID); return i.Status != Running })
	end := waitEnd(t, m, info.ID)
	if end.Notice != "tests now pass" || m.HasNotices(sid) {
		t.Errorf("Wait = %+v; notices pending %v", end, m.HasNotices(sid))
	}
}

func TestWait_answers_ended_only_after_the_end_was_told(t *testing.T) {
	telling := make(chan struct{}) // OnNotice has the end
	release := make(chan struct{}) // lets OnNotice return
	letGo := sync.OnceFunc(func() { close(release) })
	var told atomic.Bool
	m := newManager(t, func(c *Config) {
		c.OnNotice = func(i Info) {
			close(telling)
			select {
			case <-release:
			case <-time.After(10 * time.Second): // a failed test does not hang
			}
			told.Store(true)
		}
	})
	t.Cleanup(letGo) // before m.Close, which waits for the end to be told
	info := start(t, m, Spec{Run: func(ctx context.Context, out io.Writer, r Reporter) (int, error) { return 0, nil }})
	select {
	case <-telling:
	case <-time.After(10 * time.Second):
		t.Fatal("the end was not noticed")
	}

	// The task has ended and its end is being told: a Wait that cannot
	// wait for the telling to finish (its ctx is done) does not answer
	// ended, and leaves the notice.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if got, out, err := m.Wait(cancelled, sid, info.ID, time.Minute); out == WaitEnded || !errors.Is(err, context.Canceled) {
		t.Errorf("Wait while OnNotice runs = %v, %v, %v (told %v); want no end yet", got.Status, out, err, told.Load())
	}
	if !m.HasNotices(sid) {
		t.Error("a Wait that did not answer ended took the end's notice")
	}

	// One that can wait answers ended once OnNotice returned.
	type answer struct {
		out  WaitOutcome
		err  error
		told bool
	}
	answered := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, out, err := m.Wait(ctx, sid, info.ID, 0)
		answered <- answer{out, err, told.Load()}
	}()
	letGo()
	select {
	case a := <-answered:
		if a.out != WaitEnded || a.err != nil || !a.told {
			t.Errorf("Wait = %v, %v, told before the answer %v; want ended after OnNotice", a.out, a.err, a.told)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not answer")
	}
	if m.HasNotices(sid) {
		t.Errorf("an end seen through Wait left a notice: %+v", m.TakeNotices(sid))
	}
}

func TestNoEndNotice_leaves_only_reported_notices(t *testing.T) {
	m := newManager(t)
	info := start(t, m, Spec{Kind: "hook", NoEndNotice: true, Run: func(ctx context.Context, out io.Writer, r Reporter) (int, error) {
		r.Notify("hook says hi")
		return 0, nil
	}})
	testutil.Eventually(t, 10*time.Second, "the end", func() bool { i, _ := m.Get(sid, info.ID); return i.Status != Running })
	ns := m.TakeNotices(sid)
	if len(ns) != 1 || ns[0].Notice != "hook says hi" {
		t.Errorf("notices = %+v", ns)
	}
}

func TestStart_refuses_bad_specs_and_missing_sessions(t *testing.T) {
	m := newManager(t)
	if _, err := m.Start(context.Background(), Spec{Cmd: sh("true")}); err == nil {
		t.Error("started without a session")
	}
	if _, err := m.Start(bg, Spec{}); err == nil {
		t.Error("started a spec with neither Cmd nor Run")
	}
	if _, err := m.Start(bg, Spec{Cmd: sh("true"), Run: func(context.Context, io.Writer, Reporter) (int, error) { return 0, nil }}); err == nil {
		t.Error("started a spec with both Cmd and Run")
	}
	if _, err := m.Start(bg, Spec{Cmd: osexec.Command("/nonexistent/binary")}); err == nil {
		t.Error("started a missing binary")
	}
	// A failed start gives its id back.
	if info := startSh(t, m, "true"); info.ID != "1" {
		t.Errorf("first started task has id %s", info.ID)
	}
}

func TestAdopt_after_Close_leaves_the_command_with_its_caller(t *testing.T) {
	m := newManager(t)
	m.Close()
	_, err := m.Adopt(bg, Spec{}, RunningCommand{Tree: nopTree{}, Wait: make(chan error), AttachOutput: func(io.Writer) {}})
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Adopt after Close: %v", err)
	}
}

type nopTree struct{}

func (nopTree) Kill() error    { return nil }
func (nopTree) Close()         {}
func (nopTree) Started() error { return nil }
func (nopTree) Exceeded() bool { return false }

func TestHandoff_keeps_early_output_in_order(t *testing.T) {
	var h Handoff
	var sink strings.Builder
	io.WriteString(&h, "one\n")
	if string(h.Bytes()) != "one\n" {
		t.Errorf("Bytes before attach = %q", h.Bytes())
	}
	h.Attach(&sink)
	io.WriteString(&h, "two\n")
	if sink.String() != "one\ntwo\n" || len(h.Bytes()) != 0 {
		t.Errorf("after attach: sink %q, kept %q", sink.String(), h.Bytes())
	}
}

func TestKeepUTF8_replaces_invalid_bytes_and_a_trailing_CR(t *testing.T) {
	if got := KeepUTF8([]byte("ok\xff\r")); got != "ok\uFFFD" {
		t.Errorf("KeepUTF8 = %q", got)
	}
	if got := KeepUTF8([]byte("héllo")); got != "héllo" {
		t.Errorf("KeepUTF8 changed valid text: %q", got)
	}
}

func TestOutput_splits_a_line_that_never_ends(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	o := newOutput(f, nil, 0)
	o.Write([]byte(strings.Repeat("x", maxLine+10)))
	o.close()
	lines, total, _, err := ReadLines(f.Name(), 1, 0)
	if err != nil || total != 2 || len(lines[0]) != maxLine || len(lines[1]) != 10 {
		t.Errorf("total %d, err %v", total, err)
	}
}

func TestFiles_name_outputs_by_refs_that_resolve(t *testing.T) {
	fs := Files{Dir: t.TempDir()}
	path, ref, err := fs.Output("sess_1", "3")
	if err != nil || !strings.HasPrefix(ref, "out:sess_1:") {
		t.Fatalf("Output = %q, %q, %v", path, ref, err)
	}
	if got, err := fs.Resolve(ref); err != nil || got != path {
		t.Errorf("Resolve(%q) = %q, %v; want %q", ref, got, err, path)
	}
	for _, bad := range []string{"out:../x:abcdef", "out:s:zz", "file:s:abcdef"} {
		if _, err := fs.Resolve(bad); err == nil {
			t.Errorf("Resolve(%q) accepted", bad)
		}
	}
	if _, _, err := fs.Output("../etc", "1"); err == nil {
		t.Error("Output accepted a session id with a path in it")
	}
}
