package proctree

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A kept view. Building a confinement's view costs a job's start a mount
// namespace copied from the worker's, a tmpfs, a bind mount per path, a
// pivot_root and the old root detached (about half a millisecond), and
// its end the namespace torn down. Every job of a session has the same
// view, so it is built once, by a helper that runs the view's steps and
// then holds (the program's "hold" step) until the worker has opened its
// namespaces; the worker keeps those descriptors beside the rule set they
// belong to (confcache.go), and each job's helper enters them with
// setns(2) instead (the "setns" step), then closes them. The view is
// dropped with its rule set: when a read-write directory is not the one it
// was made with (a workspace made anew, a disk image mounted on it), when
// a path of the confinement names another inode, and when the cache is
// full. A job cannot change the view it shares with the session's other
// jobs: mounting needs a capability, and it has none.

// heldView is a kept view's namespaces: the mount namespace and, where the
// worker is not root, the user namespace that owns it; -1 for none.
type heldView struct{ mnt, user int }

var noView = heldView{mnt: -1, user: -1}

func (v heldView) ok() bool { return v.mnt >= 0 }

func (v heldView) close() {
	for _, fd := range []int{v.mnt, v.user} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}

// dup is a copy of v's descriptors, the caller's to close.
func (v heldView) dup() (heldView, error) {
	out := noView
	for _, p := range []struct{ from, to *int }{{&v.mnt, &out.mnt}, {&v.user, &out.user}} {
		if *p.from < 0 {
			continue
		}
		d, err := unix.FcntlInt(uintptr(*p.from), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			out.close()
			return noView, err
		}
		*p.to = d
	}
	return out, nil
}

// holdView builds the view the steps describe in a helper of its own and
// returns its namespaces.
func holdView(view []byte) (heldView, error) {
	exe, err := helperPath()
	if err != nil {
		return noView, err
	}
	p := &program{}
	p.step(programMagic)
	p.b = append(p.b, view...)
	p.step("hold")
	f, err := specFile(p.b)
	if err != nil {
		return noView, err
	}
	defer func() { _ = f.Close() }() // the helper has its copy
	cmd := &exec.Cmd{Path: exe, Args: []string{helperName}, Env: []string{}, ExtraFiles: []*os.File{f}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return noView, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return noView, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return noView, fmt.Errorf("proctree: start the helper to keep a view: %w", err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	v := noView
	if line == "held\n" {
		dir := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/"
		v.mnt, err = unix.Open(dir+"mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil && os.Geteuid() != 0 {
			v.user, err = unix.Open(dir+"user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			v.close()
			v = noView
			err = fmt.Errorf("proctree: open the kept view's namespace: %w", err)
		}
	} else {
		err = errors.New("proctree: the helper did not keep a view: " + strings.TrimSpace(stderr.String()))
	}
	_ = stdin.Close() // lets it exit
	if werr := cmd.Wait(); werr != nil && err == nil {
		v.close()
		v, err = noView, fmt.Errorf("proctree: the helper that kept a view: %w", werr)
	}
	return v, err
}
