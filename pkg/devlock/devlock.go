// Package devlock keeps one `jetway dev` per data directory and tells the
// client commands where that dev serves.
//
// Two devs on one data directory would run two nats-servers on one
// JetStream store, which corrupts it. The first dev holds an flock on
// DIR/dev.lock for as long as it runs; the file holds its pid and URLs, so
// a second dev can say who has the directory and a client started in the
// same directory finds the HTTP API without being told the port. The lock
// (not the file's existence) says whether a dev is running: a dev that was
// killed leaves the file behind, but the kernel drops its lock.
package devlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FileName is the lock file in the data directory.
const FileName = "dev.lock"

// Info is what a running dev says about itself in its lock file.
type Info struct {
	PID int `json:"pid"`
	// URL is the HTTP root (API, /healthz, /metrics), e.g.
	// http://127.0.0.1:8080; empty while the dev is still starting.
	URL string `json:"url,omitempty"`
	// NATS is the embedded nats-server's client URL, once it runs.
	NATS string `json:"nats,omitempty"`
}

// HeldError is returned by Acquire when another dev holds the directory.
type HeldError struct {
	Dir  string
	Info Info // what the holder wrote; zero fields when it had not yet
}

func (e *HeldError) Error() string {
	who := "another jetway dev"
	if e.Info.PID > 0 {
		who = fmt.Sprintf("jetway dev (pid %d)", e.Info.PID)
	}
	where := ""
	if e.Info.URL != "" {
		where = " at " + e.Info.URL
	}
	return fmt.Sprintf("%s is already running on data directory %s%s", who, e.Dir, where)
}

// Lock is a held data directory.
type Lock struct {
	f *os.File
}

// Acquire takes dir's lock, creating the file if needed; it fails with a
// *HeldError when a running dev holds it.
func Acquire(dir string) (*Lock, error) {
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open dev lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer func() { _ = f.Close() }() // not ours: only read, nothing to lose
		if errors.Is(err, unix.EWOULDBLOCK) {
			info, _ := readInfo(f)
			return nil, &HeldError{Dir: dir, Info: info}
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	l := &Lock{f: f}
	if err := l.Publish(Info{PID: os.Getpid()}); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// Publish replaces what the lock file says about this dev.
func (l *Lock) Publish(info Info) error {
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("encode dev lock: %w", err)
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("write dev lock: %w", err)
	}
	if _, err := l.f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("write dev lock: %w", err)
	}
	return nil
}

// Release empties the file and lets the directory go. The file stays:
// removing it would race with a dev that has just opened it.
func (l *Lock) Release() {
	_ = l.f.Truncate(0)
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
}

// Running reports the dev that holds dir's lock, if one does.
func Running(dir string) (Info, bool) {
	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		return Info{}, false
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	// A shared lock we can take means no dev holds the exclusive one.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return Info{}, false
	}
	info, err := readInfo(f)
	if err != nil {
		return Info{}, false
	}
	return info, true
}

func readInfo(f *os.File) (Info, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<16))
	if err != nil {
		return Info{}, fmt.Errorf("read dev lock: %w", err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, fmt.Errorf("read dev lock %s: %w", f.Name(), err)
	}
	return info, nil
}
