package devlock

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestA_second_lock_is_refused_naming_the_holder_and_a_released_one_is_free(t *testing.T) {
	dir := t.TempDir()
	if _, ok := Running(dir); ok {
		t.Fatal("Running before any dev started")
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(Info{PID: os.Getpid(), URL: "http://127.0.0.1:9"}); err != nil {
		t.Fatal(err)
	}
	if info, ok := Running(dir); !ok || info.URL != "http://127.0.0.1:9" {
		t.Fatalf("Running = %+v, %v while held", info, ok)
	}
	_, err = Acquire(dir)
	var held *HeldError
	if !errors.As(err, &held) || held.Info.PID != os.Getpid() || !strings.Contains(err.Error(), "http://127.0.0.1:9") {
		t.Fatalf("second Acquire: %v", err)
	}
	l.Release()
	if _, ok := Running(dir); ok {
		t.Fatal("Running after Release")
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}
