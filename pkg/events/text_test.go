package events

import (
	"strings"
	"testing"
	"time"
)

// exited is the job exit the headline and notice examples are written
// for: job 3 (gh), 21m05s, "all checks passed".
func exited(code int) JobExited {
	return JobExited{
		ID:           3,
		Program:      "gh",
		ExitStatus:   code,
		RunningForMS: (21*60 + 5) * 1000,
		Tail:         "all checks passed\n",
		Status:       StatusExited,
	}
}

func overdue7() JobOverdue {
	return JobOverdue{ID: 7, Program: "make", RunningForMS: 600_000}
}

// Seed 000: headline_is_one_short_line.
func TestHeadline_is_one_short_line(t *testing.T) {
	if got, ok := Headline(exited(0)); !ok || got != "job 3 (gh) exited 0 after 21m" {
		t.Errorf("Headline(exited 0) = %q, %v", got, ok)
	}
	if got, ok := Headline(Input{Text: "hi"}); ok || got != "" {
		t.Errorf("Headline(input) = %q, %v; want none", got, ok)
	}
	if got := FmtElapsed(45 * time.Second); got != "45s" {
		t.Errorf("FmtElapsed(45s) = %q", got)
	}
	if got := FmtElapsed(3900 * time.Second); got != "1h05m" {
		t.Errorf("FmtElapsed(3900s) = %q", got)
	}
}

// Seed 000: notice_carries_the_tail_and_what_to_do.
func TestNotice_carries_the_tail_and_what_to_do(t *testing.T) {
	n, ok := Notice(exited(1))
	if !ok {
		t.Fatal("no notice for an exited job")
	}
	for _, want := range []string{"job 3 (gh) exited 1", "all checks passed", "failed"} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q does not contain %q", n, want)
		}
	}
	n, ok = Notice(overdue7())
	if !ok {
		t.Fatal("no notice for an overdue job")
	}
	if !strings.Contains(n, "shell_job_status (id 7)") {
		t.Errorf("overdue notice %q does not name shell_job_status (id 7)", n)
	}
	if strings.Contains(n, "Last output") {
		t.Errorf("overdue notice with an empty tail shows Last output: %q", n)
	}
	if _, ok := Notice(Input{Text: "x"}); ok {
		t.Error("typed input has a notice; it is the model's input as it stands")
	}
}

func TestFmtElapsed_is_coarse_on_purpose(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {-time.Second, "0s"}, {999 * time.Millisecond, "0s"}, {45 * time.Second, "45s"},
		{59 * time.Second, "59s"}, {60 * time.Second, "1m"}, {21*time.Minute + 5*time.Second, "21m"},
		{3599 * time.Second, "59m"}, {3600 * time.Second, "1h00m"}, {3900 * time.Second, "1h05m"},
		{26*time.Hour + 7*time.Minute, "26h07m"},
	} {
		if got := FmtElapsed(c.d); got != c.want {
			t.Errorf("FmtElapsed(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestNotice_texts_are_exact(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Payload
		want string
	}{
		{"exit 0", exited(0), "[background job notice] job 3 (gh) exited 0 after 21m.\nLast output:\nall checks passed\nTell the user the result."},
		{"exit 1", exited(1), "[background job notice] job 3 (gh) exited 1 after 21m.\nLast output:\nall checks passed\nTell the user it failed and why, from the output."},
		{"overdue, no tail", overdue7(), "[background job notice] job 7 (make) still running after 10m.\nCheck it with shell_job_status (id 7); tell the user whether it is progressing, and kill it with shell_job_kill if it is stuck."},
		{"overdue, blank tail", JobOverdue{ID: 7, Program: "make", RunningForMS: 600_000, Tail: " \n\t\n"}, "[background job notice] job 7 (make) still running after 10m.\nCheck it with shell_job_status (id 7); tell the user whether it is progressing, and kill it with shell_job_kill if it is stuck."},
		{"tail keeps leading indent, loses trailing space", JobOverdue{ID: 7, Program: "make", RunningForMS: 600_000, Tail: "  CC a.o\n  CC b.o \n\n"}, "[background job notice] job 7 (make) still running after 10m.\nLast output:\n  CC a.o\n  CC b.o\nCheck it with shell_job_status (id 7); tell the user whether it is progressing, and kill it with shell_job_kill if it is stuck."},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Notice(c.p)
			if !ok || got != c.want {
				t.Errorf("Notice = %v\n%q\nwant\n%q", ok, got, c.want)
			}
		})
	}
}

func TestHeadline_says_honestly_how_a_job_ended_that_did_not_exit(t *testing.T) {
	for status, want := range map[JobStatus]string{
		StatusExited:   "job 3 (gh) exited 137 after 2m",
		StatusKilled:   "job 3 (gh) was killed after 2m",
		StatusTimedOut: "job 3 (gh) timed out after 2m",
		StatusFailed:   "job 3 (gh) failed after 2m",
		StatusLost:     "job 3 (gh) was lost after 2m",
		"":             "job 3 (gh) exited 137 after 2m",
	} {
		j := JobExited{ID: 3, Program: "gh", ExitStatus: 137, RunningForMS: 125_000, Status: status}
		if got, _ := Headline(j); got != want {
			t.Errorf("status %q: headline %q, want %q", status, got, want)
		}
		n, _ := Notice(j)
		if !strings.HasPrefix(n, "[background job notice] "+want+".\n") {
			t.Errorf("status %q: notice %q does not start with the headline", status, n)
		}
		if status != StatusExited && status != "" && strings.Contains(n, "137") {
			t.Errorf("status %q: notice shows a meaningless exit status: %q", status, n)
		}
	}
}

func TestHeadline_stays_one_line_for_a_hostile_program_name(t *testing.T) {
	j := JobOverdue{ID: 1, Program: "sh\n-c\r\nrm", RunningForMS: 1000}
	got, _ := Headline(j)
	if strings.ContainsAny(got, "\r\n") || got != "job 1 (sh -c rm) still running after 1s" {
		t.Errorf("headline %q", got)
	}
}

func TestHeadline_is_none_for_what_the_person_typed(t *testing.T) {
	for _, p := range []Payload{Input{Text: "hi"}, Steer{Note: "stop"}} {
		if got, ok := Headline(p); ok {
			t.Errorf("Headline(%T) = %q; want none", p, got)
		}
	}
}

func TestExternalNotice_names_type_source_and_data(t *testing.T) {
	x := External{Type: "com.github.push", Source: "https://github.com/x/y", DataContentType: "application/json", Data: []byte(`{"ref":"main"}`)}
	want := "[external event] com.github.push from https://github.com/x/y:\n{\"ref\":\"main\"}"
	if got, ok := Notice(x); !ok || got != want {
		t.Errorf("Notice = %q, want %q", got, want)
	}
	if got, _ := Headline(x); got != "external event com.github.push from https://github.com/x/y" {
		t.Errorf("Headline = %q", got)
	}
	x.Data = nil
	if got, _ := Notice(x); got != "[external event] com.github.push from https://github.com/x/y (no data)." {
		t.Errorf("no-data notice = %q", got)
	}
	x.Data = []byte{0xff, 0x00, 0x10}
	x.DataContentType = "application/octet-stream"
	if got, _ := Notice(x); !strings.Contains(got, "3 bytes of binary data (application/octet-stream)") {
		t.Errorf("binary notice = %q", got)
	}
}

func TestExternalNotice_truncates_huge_data_at_a_character_boundary(t *testing.T) {
	data := []byte(strings.Repeat("é", MaxExternalData)) // 2 bytes each
	got := ExternalNotice(External{Type: "x.big", Source: "s", Data: data})
	if len(got) > MaxExternalData+200 {
		t.Errorf("notice is %d bytes; want about %d", len(got), MaxExternalData)
	}
	if !strings.HasSuffix(got, "… (truncated: 8192 of 16384 bytes shown)") {
		t.Errorf("notice ends %q", got[len(got)-60:])
	}
	if !strings.HasPrefix(got, "[external event] x.big from s:\né") || strings.Contains(got, "\uFFFD") {
		t.Errorf("notice is cut inside a character or lost its head: %q", got[:40])
	}
}

func TestSteerNotice_says_the_instruction_takes_precedence(t *testing.T) {
	got, ok := Notice(Steer{Note: " use the staging cluster\nnot prod \n"})
	want := "[steering from the user] This instruction takes precedence over the original request where the two disagree:\n> use the staging cluster\n> not prod"
	if !ok || got != want {
		t.Errorf("Notice(steer) = %q, want %q", got, want)
	}
}

func TestInputNotice_marks_text_typed_mid_run(t *testing.T) {
	if got := InputNotice(Input{Text: "also run the linter\n"}); got != "[message from the user while you were working]\nalso run the linter" {
		t.Errorf("InputNotice = %q", got)
	}
}

func TestResumeNotice_counts_this_check(t *testing.T) {
	r := Resume{BookedBy: "itin-42", WaitingFor: "CI on PR 7", BookedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Checks: 2}
	got, ok := Notice(r)
	want := "[layover resumed] Work set down by itin-42 at 2026-11-30T12:00:00Z was waiting for: CI on PR 7\nThis is check 3. See whether it has happened and act on it if it has; if not, set it down again rather than waiting."
	if !ok || got != want {
		t.Errorf("Notice(resume) = %q, want %q", got, want)
	}
	if h, _ := Headline(r); h != "picked up work set down by itin-42, waiting for: CI on PR 7" {
		t.Errorf("Headline(resume) = %q", h)
	}
}

func TestTaskRef_newer_seq_of_the_same_task_supersedes(t *testing.T) {
	a1, a2, b3 := TaskRef{Task: "t4", Seq: 1}, TaskRef{Task: "t4", Seq: 2}, TaskRef{Task: "t5", Seq: 3}
	switch {
	case !a2.Supersedes(a1):
		t.Error("seq 2 does not supersede seq 1 of the same task")
	case a1.Supersedes(a2), a1.Supersedes(a1):
		t.Error("an older or equal seq supersedes")
	case b3.Supersedes(a1):
		t.Error("another task's notice supersedes")
	case (TaskRef{}).Supersedes(TaskRef{}):
		t.Error("plain command jobs supersede each other")
	}
}
