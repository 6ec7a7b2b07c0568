package jobsapi

import (
	"errors"
	"testing"
)

func TestProgram_is_the_first_word_a_headline_shows(t *testing.T) {
	for cmd, want := range map[string]string{
		"go test ./...":                "go",
		"FOO=1 BAR=x /usr/bin/make -j": "make",
		"  'gh' pr list":               "gh",
		"(cd x && ls)":                 "cd",
		"":                             "sh",
		"A=1":                          "sh",
		"./build.sh --all":             "build.sh",
	} {
		if got := Program(cmd); got != want {
			t.Errorf("Program(%q) = %q, want %q", cmd, got, want)
		}
	}
}

func TestError_matches_the_sentinel_of_its_code(t *testing.T) {
	err := error(&Error{Code: CodeConflict, Op: OpStart, Message: "limit"})
	if !errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
		t.Errorf("Is: conflict %v, not found %v", errors.Is(err, ErrConflict), errors.Is(err, ErrNotFound))
	}
	if err.Error() != "jobs start: limit" {
		t.Errorf("Error() = %q", err.Error())
	}
}

func TestSubject_names_worker_and_op(t *testing.T) {
	if got := Subject("w1", OpKillSession); got != "jetway.jobs.w1.kill_session" {
		t.Errorf("Subject = %q", got)
	}
	if ValidWorkerID("w.1") == nil || ValidWorkerID("w-1_a") != nil {
		t.Error("worker id rule")
	}
}
