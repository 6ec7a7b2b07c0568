package proctree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The fork server. Starting a tree through the helper with exec.Cmd costs
// the worker a clone of itself (vfork: it waits until the child has
// exec'd), the child's setup in Go's runtime, and an execve of the helper
// from its memfd; inside a busy jobs worker that was 0.3-0.5 ms at the
// median, the largest part of a job's start. The helper can instead be
// started once, as a fork server ("serve", confiner/confine.c), and asked
// for each tree: it forks itself (a process of a few pages, no Go runtime
// to set up, no exec), and the child takes the descriptors the worker sent
// as its 0, 1, 2, 3… and runs its program exactly as a helper started by
// exec.Cmd does: the same steps, the same confinement, the same exec.
//
// What the tree's root keeps from an exec.Cmd start: it is the worker's
// child (CLONE_PARENT), so the worker waits for it and its SIGCHLD is the
// worker's; it is born in its v2 cgroup (CLONE_INTO_CGROUP); it is in a
// process group (or session) of its own; it dies with the worker's thread
// that started the server (the parent-death signal), a thread kept for
// that alone (runtime.LockOSThread, never released); its environment is
// empty until the command's exec. The server itself has an empty
// environment, and holds nothing but its socket.
//
// A command whose exec.Cmd asks for what the server does not do (a
// context, standard streams that are not files, credentials, a
// terminal, a relative directory) starts through exec.Cmd as before, and
// so does every command while the server cannot be had. One given no
// directory starts in the worker's current one (/proc/<worker>/cwd), as
// its child would.

// The request's fields as confine.c reads them.
const (
	spawnMagic     = 0x6a637a31
	spawnSetsid    = 1
	spawnCgroup    = 2
	spawnWorkerCwd = 4
	spawnMaxFDs    = 16
)

// forkServerRestartEvery is how often a server that died may be started
// again: one that dies at once is not restarted at every job.
var forkServerRestartEvery = time.Second

// forkServerTimeout bounds a request's answer: a server that does not
// answer (stopped, say) is dropped and the start goes through exec.Cmd.
const forkServerTimeout = 10 * time.Second

var fsrv struct {
	once sync.Once
	mu   sync.Mutex // one request at a time; guards the fields below
	fd   int        // our end of the socket; -1 while there is no server
	pid  int
	// wake asks the server's goroutine to start it again; lastStart
	// keeps that to once per forkServerRestartEvery.
	wake      chan struct{}
	lastStart time.Time
	// devNull is /dev/null for a nil standard stream, opened once.
	devNull *os.File
	// unsupported: clone3 is not to be had here; no server is started
	// again.
	unsupported bool
}

// forkServerUsable reports whether cmd can start through the fork
// server: the fields of an exec.Cmd and its SysProcAttr that Host.Start
// sets, and no others.
func forkServerUsable(cmd *exec.Cmd) bool {
	if cmd.Cancel != nil || cmd.WaitDelay != 0 || cmd.Process != nil || len(cmd.ExtraFiles) < 1 ||
		len(cmd.ExtraFiles) > spawnMaxFDs-3 || (cmd.Dir != "" && !filepath.IsAbs(cmd.Dir)) {
		return false
	}
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		if _, ok := s.(*os.File); s != nil && !ok {
			return false
		}
	}
	a := cmd.SysProcAttr
	if a == nil {
		return false
	}
	plain := syscall.SysProcAttr{
		Setsid: a.Setsid, Setpgid: a.Setpgid, Pdeathsig: a.Pdeathsig,
		UseCgroupFD: a.UseCgroupFD, CgroupFD: a.CgroupFD,
	}
	return a.Pgid == 0 && a.Pdeathsig == syscall.SIGKILL && a.Setsid != a.Setpgid && sameSysProcAttr(a, &plain)
}

// sameSysProcAttr compares the fields that can be compared: a
// SysProcAttr with any other field set (a credential, a terminal, name
// spaces, ambient capabilities, id mappings) is not for the server.
func sameSysProcAttr(a, b *syscall.SysProcAttr) bool {
	return a.Chroot == b.Chroot && a.Credential == b.Credential && a.Ptrace == b.Ptrace &&
		a.Setctty == b.Setctty && a.Noctty == b.Noctty && a.Ctty == b.Ctty && a.Foreground == b.Foreground &&
		a.Cloneflags == b.Cloneflags && a.Unshareflags == b.Unshareflags && len(a.UidMappings) == 0 &&
		len(a.GidMappings) == 0 && a.GidMappingsEnableSetgroups == b.GidMappingsEnableSetgroups &&
		len(a.AmbientCaps) == 0 && a.PidFD == nil
}

// initForkServer starts the server the first time it is called and
// returns once that start succeeded or failed.
func initForkServer() {
	fsrv.once.Do(func() {
		fsrv.fd = -1
		fsrv.wake = make(chan struct{}, 1)
		ready := make(chan struct{})
		go runForkServer(ready)
		<-ready
	})
}

// runForkServer starts the server, waits for it, and starts it again when
// a start finds it gone. Its goroutine keeps its thread for good: the
// server's children are the children of the thread that started the
// server, and their parent-death signal comes when that thread ends.
func runForkServer(ready chan<- struct{}) {
	runtime.LockOSThread() // never unlocked: see above
	first := true
	for {
		// Started without fsrv.mu, which a start holds inside startMu:
		// starting takes startMu too.
		cmd, fd, err := startForkServer()
		fsrv.mu.Lock()
		fsrv.lastStart = time.Now()
		if err == nil {
			fsrv.fd, fsrv.pid = fd, cmd.Process.Pid
		}
		fsrv.mu.Unlock()
		if first {
			close(ready)
			first = false
		}
		if err == nil {
			_ = cmd.Wait() // it ended: its status says nothing we use
			untrack(cmd.Process.Pid)
			fsrv.mu.Lock()
			if fsrv.fd == fd {
				_ = unix.Close(fd)
				fsrv.fd, fsrv.pid = -1, 0
			}
			fsrv.mu.Unlock()
		}
		<-fsrv.wake
	}
}

// startForkServer starts the helper with the program "serve" and one end
// of a socket pair on descriptor 4; the other end is returned.
func startForkServer() (*exec.Cmd, int, error) {
	exe, err := helperPath()
	if err != nil {
		return nil, -1, err
	}
	if fsrv.devNull == nil {
		if fsrv.devNull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
			return nil, -1, fmt.Errorf("proctree: fork server: %w", err)
		}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("proctree: fork server: socketpair: %w", err)
	}
	// A blocking read of the answer, bounded: one system call per answer.
	tv := unix.NsecToTimeval(forkServerTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		_ = unix.Close(pair[0])
		_ = unix.Close(pair[1])
		return nil, -1, fmt.Errorf("proctree: fork server: socket timeout: %w", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "jetway-confine-serve")
	defer func() { _ = theirs.Close() }() // the server has its copy
	p := &program{}
	p.step(programMagic)
	p.step("serve", "4")
	prog, err := specFile(p.b)
	if err != nil {
		_ = unix.Close(pair[0])
		return nil, -1, err
	}
	defer func() { _ = prog.Close() }() // read by the server at its start
	cmd := &exec.Cmd{Path: exe, Args: []string{helperName}, Env: []string{}, ExtraFiles: []*os.File{prog, theirs}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	startMu.RLock()
	err = cmd.Start()
	if err == nil {
		// Its own Wait reaps it, never the reaper.
		track(cmd.Process.Pid)
	}
	startMu.RUnlock()
	if err != nil {
		_ = unix.Close(pair[0])
		return nil, -1, fmt.Errorf("proctree: start the fork server: %w", err)
	}
	return cmd, pair[0], nil
}

// errNoForkServer: the start goes through exec.Cmd instead.
var errNoForkServer = errors.New("proctree: no fork server")

// forkServerStart starts cmd (already rewritten to run the helper, its
// program in ExtraFiles[0]) through the fork server, into the cgroup
// cgroupFD when it is not -1. startMu is held (shared) by the caller, who
// tracks the pid. errNoForkServer means nothing was started and cmd is
// untouched: start it with exec.Cmd.
func forkServerStart(cmd *exec.Cmd, cgroupFD int) (*os.Process, error) {
	if !forkServerUsable(cmd) {
		return nil, errNoForkServer
	}
	initForkServer()
	fsrv.mu.Lock()
	defer fsrv.mu.Unlock()
	fd := fsrv.fd
	if fsrv.unsupported {
		return nil, errNoForkServer
	}
	if fd < 0 {
		if time.Since(fsrv.lastStart) >= forkServerRestartEvery {
			select {
			case fsrv.wake <- struct{}{}:
			default:
			}
		}
		return nil, errNoForkServer
	}
	fds := make([]int, 0, 3+len(cmd.ExtraFiles)+1)
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		f, _ := s.(*os.File)
		if f == nil {
			f = fsrv.devNull
		}
		// Fd, as exec.Cmd does, puts the file in blocking mode: the
		// child shares its open file description.
		fds = append(fds, int(f.Fd()))
	}
	for _, f := range cmd.ExtraFiles {
		fds = append(fds, int(f.Fd()))
	}
	var req [12]byte
	flags := uint32(0)
	if cmd.SysProcAttr.Setsid {
		flags |= spawnSetsid
	}
	if cmd.Dir == "" {
		flags |= spawnWorkerCwd
	}
	binary.NativeEndian.PutUint32(req[0:], spawnMagic)
	binary.NativeEndian.PutUint32(req[8:], uint32(len(fds)))
	if cgroupFD >= 0 {
		flags |= spawnCgroup
		fds = append(fds, cgroupFD)
	}
	binary.NativeEndian.PutUint32(req[4:], flags)
	err := unix.Sendmsg(fd, req[:], unix.UnixRights(fds...), nil, 0)
	runtime.KeepAlive(cmd)
	if err != nil {
		dropForkServer(fd)
		return nil, errNoForkServer
	}
	var ans [4]byte
	n, err := readAnswer(fd, ans[:])
	if err != nil || n != len(ans) {
		// Whether a child was made cannot be told: the start fails
		// rather than risk two, and the caller's cleanup of the tree
		// (its cgroup killed) ends one that was.
		dropForkServer(fd)
		return nil, fmt.Errorf("proctree: the fork server did not answer (%v); it was stopped", err)
	}
	pid := int(int32(binary.NativeEndian.Uint32(ans[:])))
	if pid == -int(syscall.ENOSYS) || pid == -int(syscall.EPERM) {
		// A kernel without clone3 (before 5.3), or a seccomp profile
		// that refuses it (container runtimes' refuse it with ENOSYS,
		// so that a C library falls back to clone): exec.Cmd, which
		// then uses clone, from now on.
		fsrv.unsupported = true
		dropForkServer(fd)
		return nil, errNoForkServer
	}
	if pid <= 0 {
		return nil, fmt.Errorf("proctree: fork server: clone3: %w", syscall.Errno(-pid))
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("proctree: fork server: the child %d: %w", pid, err)
	}
	return p, nil
}

// readAnswer reads the server's answer, waiting forkServerTimeout at most
// (the socket's SO_RCVTIMEO).
func readAnswer(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, errors.New("no answer in " + forkServerTimeout.String())
		case err != nil:
			return 0, err
		case n == 0:
			return 0, errors.New("the server is gone")
		}
		return n, nil
	}
}

// dropForkServer kills a server that failed a request and forgets it;
// the next start asks for a new one. fsrv.mu is held.
func dropForkServer(fd int) {
	if fsrv.fd != fd {
		return
	}
	if fsrv.pid > 0 {
		_ = syscall.Kill(fsrv.pid, syscall.SIGKILL)
	}
	_ = unix.Close(fd)
	fsrv.fd, fsrv.pid = -1, 0
}
