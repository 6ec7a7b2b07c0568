package tasks

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// spareCount is how many empty output files are kept ready: enough for
// starts in quick succession (a model's commands one after another, each
// a few milliseconds), since a file is made only refillDelay after the
// start that took one. With 2, back-to-back starts a few milliseconds
// apart ran out: many of them created their file (0.8 ms on this
// project's ext4 VMs) and their start p50 was 1.2 ms in process, 0.8-1.0
// with 8. A burst past it creates files as before.
const spareCount = 8

// spares keeps empty output files ready, made ahead of time in the
// background. Creating a file is most of what starting a task costs on
// some filesystems (on this project's ext4 VMs a create took 0.3–0.8 ms,
// against 0.02 ms to link a ready file into place), and a task's start
// should cost about what starting its process does.
//
// A spare is an unnamed file (O_TMPFILE) made in the directory of the last
// output; a start links it under the task's output path (any directory of
// the same filesystem will do). One never taken vanishes when it is closed,
// or with the process, leaving nothing behind. Where O_TMPFILE or the link
// is refused (another filesystem, an old kernel) the file is created as
// before.
type spares struct {
	mu      sync.Mutex
	dir     string // where the next spares are made
	ready   []int  // open descriptors of unnamed files
	filling bool
	closed  bool
	done    sync.WaitGroup
}

// create opens a new empty output file at path, a spare when one is ready.
func (s *spares) create(path string) (*os.File, error) {
	s.mu.Lock()
	fd := -1
	if n := len(s.ready); n > 0 {
		fd = s.ready[n-1]
		s.ready = s.ready[:n-1]
	}
	s.mu.Unlock()
	if fd >= 0 {
		err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			s.refill(filepath.Dir(path))
			return os.NewFile(uintptr(fd), path), nil
		}
		_ = unix.Close(fd)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s.refill(filepath.Dir(path))
	return f, nil
}

// refill makes spares in dir in the background until spareCount are ready.
func (s *spares) refill(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dir = dir
	if s.filling || s.closed || len(s.ready) >= spareCount {
		return
	}
	s.filling = true
	s.done.Add(1)
	time.AfterFunc(refillDelay, s.fill)
}

// refillDelay holds a refill back until the start that used a spare is
// over: making a file while a process was being started made the start
// (clone3 and exec) about three times slower on this project's VMs.
const refillDelay = 5 * time.Millisecond

func (s *spares) fill() {
	defer s.done.Done()
	for {
		s.mu.Lock()
		if s.closed || len(s.ready) >= spareCount {
			s.filling = false
			s.mu.Unlock()
			return
		}
		dir := s.dir
		s.mu.Unlock()
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
		s.mu.Lock()
		if err != nil || s.closed {
			// No spares here (O_TMPFILE unsupported, the directory gone):
			// starts create their files until a later one refills.
			s.filling = false
			s.mu.Unlock()
			if err == nil {
				_ = unix.Close(fd)
			}
			return
		}
		s.ready = append(s.ready, fd)
		s.mu.Unlock()
	}
}

// close discards the spares and stops making them.
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	ready := s.ready
	s.ready = nil
	s.mu.Unlock()
	for _, fd := range ready {
		_ = unix.Close(fd)
	}
	s.done.Wait()
}
