// Command jetway-confine is the jobs worker's confinement helper: the
// process every confined or limited command starts as. It is small and
// static on purpose: it imports only the standard library,
// golang.org/x/sys/unix, go-landlock and the spec package (which imports
// only the standard library), so nothing of jetway's init runs in it, and
// no dynamic loader reads LD_AUDIT, LD_PRELOAD, GCONV_PATH or the like.
// It starts with an empty environment, reads its spec (confspec.Spec,
// JSON) from descriptor confspec.FD, applies every restriction to itself
// (cgroups, the file system view, rlimits, no_new_privs, Landlock, the
// seccomp filter, capabilities), and only then execve's the command with
// the command's own environment, so nothing the command, a profile or a
// model supplies runs or is read before the command is confined.
//
// The worker runs it from a sealed memfd (see pkg/tasks/proctree/helper.go).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// Landlock domains, seccomp filters and capability sets belong to a
// thread, and the one that execs passes them to the command: main runs
// on the initial thread, locked to it, from start to execve.
func init() { runtime.LockOSThread() }

func main() {
	f := os.NewFile(confspec.FD, "spec")
	if f == nil {
		fail("no spec on descriptor %d", confspec.FD)
	}
	raw, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		fail("read the spec: %v", err)
	}
	_ = f.Close()
	var spec confspec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		fail("bad spec: %v", err)
	}
	if spec.Probe {
		probe(spec.Confine)
		return
	}
	if err := apply(&spec); err != nil {
		fail("cannot confine the command, so it does not run: %v", err)
	}
	execCommand(&spec)
}

// apply restricts this process as spec says, in an order where each step
// still has what it needs: the cgroups are joined before anything else
// (their files are outside every view), the view is built while the
// helper still has the capabilities to mount, Landlock and seccomp need
// no_new_privs, and capabilities go last but RLIMIT_AS (execCommand).
func apply(spec *confspec.Spec) error {
	pid := []byte(fmt.Sprint(os.Getpid()))
	for _, dir := range spec.Join {
		if err := os.WriteFile(dir+"/cgroup.procs", pid, 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
	}
	c := spec.Confine
	if c != nil && c.View {
		if err := buildView(c); err != nil {
			return fmt.Errorf("file system view: %w", err)
		}
	}
	if spec.Dir != "" {
		// After the view, whose root replaced the one the worker's
		// directory was resolved in.
		if err := unix.Chdir(spec.Dir); err != nil {
			return fmt.Errorf("chdir %s: %w", spec.Dir, err)
		}
	}
	if spec.CPU > 0 {
		// The soft limit sends SIGXCPU; the hard one a second later
		// SIGKILL for a process that catches it.
		if err := unix.Setrlimit(unix.RLIMIT_CPU, &unix.Rlimit{Cur: spec.CPU, Max: spec.CPU + 1}); err != nil {
			return fmt.Errorf("RLIMIT_CPU: %w", err)
		}
	}
	if spec.FSize > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: spec.FSize, Max: spec.FSize}); err != nil {
			return fmt.Errorf("RLIMIT_FSIZE: %w", err)
		}
	}
	if c == nil {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := landlockSelf(c); err != nil {
		return err
	}
	if err := seccompSelf(c); err != nil {
		return err
	}
	return dropCapabilities()
}

// execCommand sets RLIMIT_AS and execve's the command. RLIMIT_AS goes
// last and nothing may allocate after it: the Go runtime reserves more
// address space than a small limit allows.
func execCommand(spec *confspec.Spec) {
	pathp, err := syscall.BytePtrFromString(spec.Path)
	if err != nil {
		fail("path: %v", err)
	}
	argvp, err := syscall.SlicePtrFromStrings(spec.Args)
	if err != nil {
		fail("argv: %v", err)
	}
	envp, err := syscall.SlicePtrFromStrings(spec.Env)
	if err != nil {
		fail("env: %v", err)
	}
	failMsg := []byte("jetway confine: cannot exec " + spec.Path + "\n")
	rl := unix.Rlimit{Cur: spec.AS, Max: spec.AS}
	if spec.AS > 0 {
		if _, _, e := syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_AS, uintptr(unsafe.Pointer(&rl)), 0, 0, 0); e != 0 {
			failRaw(failMsg)
		}
	}
	_, _, e := syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	if spec.AS == 0 {
		fail("cannot exec %s: %v", spec.Path, e)
	}
	failRaw(failMsg)
}

// probe reports whether a view can be built here, and runs nothing.
func probe(c *confspec.Confinement) {
	if c == nil {
		c = &confspec.Confinement{}
	}
	if err := buildView(c); err != nil {
		fmt.Printf("no view: %v\n", err)
		return
	}
	fmt.Println("view")
}

// fail reports on stderr (the task's output) and exits like a shell that
// could not run a command; with stderr gone there is nowhere else to
// report, and the exit status still says it.
func fail(format string, args ...any) {
	_, _ = os.Stderr.WriteString("jetway confine: " + fmt.Sprintf(format, args...) + "\n")
	os.Exit(127)
}

// failRaw is fail without allocating, for after RLIMIT_AS is set. Its
// write is dropped if it fails, as fail's is, and exit_group does not
// return.
func failRaw(msg []byte) {
	_, _, _ = syscall.RawSyscall(unix.SYS_WRITE, 2, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
	_, _, _ = syscall.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
}

// dropCapabilities empties this thread's capability sets, so the command
// runs without any, root or not. A thread that holds CAP_SETPCAP (root,
// or the helper in a user namespace of its own) empties the bounding set
// too, so an exec gains none back. no_new_privs keeps set-uid programs
// and file capabilities from adding any.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data == [2]unix.CapUserData{} {
		return nil
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for c := 0; c <= 63; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				if errors.Is(err, unix.EINVAL) {
					break // past the last capability this kernel knows
				}
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
