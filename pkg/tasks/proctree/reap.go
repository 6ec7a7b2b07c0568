package proctree

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Reaping. As a subreaper this process inherits every orphan of a task and
// must collect their exit statuses, but a Wait4(-1) loop would also collect
// the roots that exec.Cmd.Wait is waiting for (measured: 81 of 300 runs
// broke). So the roots started here are tracked, and only other zombies
// among this process's children are reaped, one pid at a time.
var (
	// startMu is held shared around cmd.Start + track and exclusively by the
	// reaper, so a root that dies before it is tracked is never taken.
	startMu   sync.RWMutex
	trackedMu sync.Mutex
	tracked   = map[int]bool{}

	reaperMu    sync.Mutex
	reaperUsers int
	reaperStop  chan struct{}
)

func track(pid int) {
	trackedMu.Lock()
	tracked[pid] = true
	trackedMu.Unlock()
}

func untrack(pid int) {
	trackedMu.Lock()
	delete(tracked, pid)
	trackedMu.Unlock()
}

func isTracked(pid int) bool {
	trackedMu.Lock()
	defer trackedMu.Unlock()
	return tracked[pid]
}

// reapOrphans collects the zombies among this process's children that no
// exec.Cmd waits for. Children in this process's own process group are left
// alone: they were started by other code (task roots and their descendants
// always run in a group of their own).
//
// The scan runs without startMu, which every start takes (shared): a scan
// reads a file per thread and would hold starts up. Each zombie it finds is
// confirmed untracked under the lock before it is reaped; a root that
// exited before its start tracked it is tracked by the time the lock is
// had.
func reapOrphans() {
	self := syscall.Getpgrp()
	for _, pid := range childrenOfSelf() {
		if isTracked(pid) {
			continue
		}
		p, ok := readStat(pid)
		if !ok || p.state != 'Z' || p.pgrp == self {
			continue
		}
		startMu.Lock()
		if !isTracked(pid) {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
		startMu.Unlock()
	}
}

// startReaper makes this process a subreaper and runs the reaper while any
// Host is open: on every SIGCHLD and once a second in case one was merged.
func startReaper() bool {
	sub := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
	reaperMu.Lock()
	defer reaperMu.Unlock()
	reaperUsers++
	if reaperUsers > 1 {
		return sub
	}
	stop := make(chan struct{})
	reaperStop = stop
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		defer signal.Stop(sig)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-sig:
				// Most SIGCHLDs are task roots that exec.Cmd.Wait reaps
				// itself; a scan of every thread's children costs far
				// more than the look that there is a zombie at all.
				if !zombieChild() {
					continue
				}
			case <-tick.C:
			}
			reapOrphans()
		}
	}()
	return sub
}

// zombieChild reports whether a child of this process has exited and not
// been waited for, without waiting for it (WNOWAIT), so exec.Cmd.Wait still
// gets its own.
func zombieChild() bool {
	// Linux zeroes the info when no child is waitable (WNOHANG).
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}

func stopReaper() {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	reaperUsers--
	if reaperUsers == 0 {
		close(reaperStop)
	}
}
