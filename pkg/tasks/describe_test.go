package tasks

import (
	"testing"
	"time"
)

func TestDescribe_prints_the_task_line(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	i := Info{
		ID: "3", SessionID: "sess", Kind: "shell", Summary: "go test ./...",
		Status: Exited, ExitCode: 0, Started: start, Ended: start.Add(4*time.Minute + 12*time.Second),
		Bytes: 1_200_000, Lines: 3400, Ref: "out:sess:ab12",
	}
	want := "t3 exited (exit 0) after 4m12s · 1.2 MB / 3400 lines · go test ./... · out:sess:ab12"
	if got := Describe(i); got != want {
		t.Errorf("Describe =\n%q, want\n%q", got, want)
	}
}

func TestDescribe_of_a_running_function_task_shows_its_progress(t *testing.T) {
	i := Info{
		ID: "4", Kind: "watch", Summary: "watch make", Status: Running,
		Started: time.Now().Add(-3 * time.Minute), Progress: "run 5, exit 0", Ref: "out:s:0a",
	}
	want := "t4 running for 3m · run 5, exit 0 · 0 B / 0 lines · watch make · out:s:0a"
	if got := Describe(i); got != want {
		t.Errorf("Describe =\n%q, want\n%q", got, want)
	}
}

func TestDescribe_names_killed_timed_out_lost_and_errors(t *testing.T) {
	s := time.Unix(0, 0)
	for _, c := range []struct {
		i    Info
		want string
	}{
		{Info{ID: "1", Status: Killed, Started: s, Ended: s.Add(45 * time.Second), Lines: 1, Bytes: 3},
			"t1 killed after 45s · 3 B / 1 line"},
		{Info{ID: "2", Status: TimedOut, Started: s, Ended: s.Add(2*time.Hour + 5*time.Minute)},
			"t2 timed out after 2h05m · 0 B / 0 lines"},
		{Info{ID: "3", Status: Lost, Started: s, Ended: s.Add(time.Minute)},
			"t3 lost after 1m · 0 B / 0 lines"},
		{Info{ID: "4", Status: Failed, ExitCode: 1, Error: "boom", Started: s, Ended: s.Add(2 * time.Second), Truncated: true, Bytes: 64_000_000},
			"t4 failed (exit 1) after 2s · error: boom · 64 MB / 0 lines (truncated)"},
	} {
		if got := Describe(c.i); got != c.want {
			t.Errorf("Describe = %q, want %q", got, c.want)
		}
	}
}

func TestTailText_is_the_last_n_lines(t *testing.T) {
	i := Info{Tail: []string{"a", "b", "c"}}
	if got := TailText(i, 2); got != "b\nc" {
		t.Errorf("TailText = %q", got)
	}
	if got := TailText(i, 10); got != "a\nb\nc" {
		t.Errorf("TailText = %q", got)
	}
}

func TestMarkLost_marks_only_running_tasks(t *testing.T) {
	at := time.Unix(100, 0)
	if got := MarkLost(Info{Status: Running}, at); got.Status != Lost || !got.Ended.Equal(at) {
		t.Errorf("running task: %+v", got)
	}
	if got := MarkLost(Info{Status: Exited}, at); got.Status != Exited || !got.Ended.IsZero() {
		t.Errorf("ended task changed: %+v", got)
	}
}
