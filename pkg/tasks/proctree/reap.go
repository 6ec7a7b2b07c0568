package proctree

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

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
		// again looks once more after a task root was the zombie found:
		// an orphan may be listed after it.
		again := time.NewTimer(time.Hour)
		again.Stop()
		defer again.Stop()
		for {
			select {
			case <-stop:
				return
			case <-sig:
			case <-again.C:
			case <-tick.C:
				reapOrphans()
				continue
			}
			// Most SIGCHLDs are task roots that exec.Cmd.Wait reaps
			// itself; a scan of every thread's children costs far more
			// (a few hundred µs of CPU, right when the next task may be
			// starting) than a look at which child exited.
			pid, ok := zombieChild()
			switch {
			case !ok:
			case pid > 0 && isTracked(pid):
				again.Reset(recheck)
			default:
				reapOrphans()
			}
		}
	}()
	return sub
}

// recheck is how soon the reaper looks again after the zombie it found was
// a task root, which its exec.Cmd.Wait reaps in the meantime.
const recheck = 20 * time.Millisecond

// zombieChild reports whether a child of this process has exited and not
// been waited for, and its pid when it can tell (0 otherwise), without
// waiting for it (WNOWAIT), so exec.Cmd.Wait still gets its own.
func zombieChild() (int, bool) {
	// Linux zeroes the info when no child is waitable (WNOHANG).
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil || info.Signo == 0 {
		return 0, false
	}
	return siginfoPid(&info), true
}

// siginfoPid reads si_pid, which x/sys/unix does not export: on 64-bit
// Linux it follows signo, errno, code and four bytes of padding. Elsewhere
// it answers 0, which makes the reaper scan as it always may.
func siginfoPid(info *unix.Siginfo) int {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return 0
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), 16)))
}

func stopReaper() {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	reaperUsers--
	if reaperUsers == 0 {
		close(reaperStop)
	}
}
