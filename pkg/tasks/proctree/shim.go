package proctree

import (
	"encoding/json"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shimEnv carries the shim's instructions to the re-executed binary. Its
// presence is what turns a process into the shim.
const shimEnv = "JETWAY_PROCTREE_SHIM"

// shimPath is the binary the shim runs as: this very executable, by its
// kernel link, so a binary replaced on disk during a deploy still works.
const shimPath = "/proc/self/exe"

// shimSpec is what the shim does before it becomes the command.
type shimSpec struct {
	Join  []string `json:"join,omitempty"`  // v1 cgroup dirs to enter
	CPU   uint64   `json:"cpu,omitempty"`   // RLIMIT_CPU, seconds
	FSize uint64   `json:"fsize,omitempty"` // RLIMIT_FSIZE, bytes
	AS    uint64   `json:"as,omitempty"`    // RLIMIT_AS, bytes
	// Confine is the file system the command may reach (Landlock).
	Confine *Confinement `json:"confine,omitempty"`
}

func (s shimSpec) needed() bool {
	return len(s.Join) > 0 || s.CPU > 0 || s.FSize > 0 || s.AS > 0 || s.Confine != nil
}

// RunShimIfRequested turns this process into the limits shim when it was
// started as one, and otherwise returns at once. Call it first thing in main
// and in TestMain of any test that starts limited trees: Go cannot set
// rlimits or v1 cgroups between fork and exec, so the tree's root is this
// binary re-executed, which sets them on itself and then execs the command.
func RunShimIfRequested() {
	raw, ok := os.LookupEnv(shimEnv)
	if !ok {
		return
	}
	runtime.LockOSThread()
	var spec shimSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		shimFail("bad spec: " + err.Error())
	}
	if len(os.Args) < 3 {
		shimFail("usage: shim PATH ARGV0 [ARGS...]")
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, dir := range spec.Join {
		if err := os.WriteFile(dir+"/cgroup.procs", pid, 0); err != nil {
			shimFail("join cgroup " + dir + ": " + err.Error())
		}
	}
	// The shim's environment is exactly what its starter gave the command
	// (never inherited: see Host.Start), less the spec.
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, shimEnv+"=") {
			env = append(env, kv)
		}
	}
	path := os.Args[1]
	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		shimFail("path: " + err.Error())
	}
	argvp, err := syscall.SlicePtrFromStrings(os.Args[2:])
	if err != nil {
		shimFail("argv: " + err.Error())
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		shimFail("env: " + err.Error())
	}
	if spec.Confine != nil {
		// After the cgroups are joined (their files lie outside what the
		// command may write) and before anything of the command runs.
		if err := confine(spec.Confine); err != nil {
			shimFail("cannot confine the command, so it does not run: " + err.Error())
		}
	}
	if spec.CPU > 0 {
		// The soft limit sends SIGXCPU; the hard one a second later SIGKILL
		// for a process that catches it.
		if err := unix.Setrlimit(unix.RLIMIT_CPU, &unix.Rlimit{Cur: spec.CPU, Max: spec.CPU + 1}); err != nil {
			shimFail("RLIMIT_CPU: " + err.Error())
		}
	}
	if spec.FSize > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: spec.FSize, Max: spec.FSize}); err != nil {
			shimFail("RLIMIT_FSIZE: " + err.Error())
		}
	}
	if spec.Confine != nil {
		if err := dropCapabilities(); err != nil {
			shimFail("cannot drop the capabilities of the command, so it does not run: " + err.Error())
		}
	}
	failMsg := []byte("jetway shim: cannot exec " + path + "\n")
	// RLIMIT_AS goes last and nothing may allocate after it: the Go runtime
	// reserves more address space than a small limit allows, and a growth
	// between the limit and execve crashed the shim in about 1% of runs.
	rl := unix.Rlimit{Cur: spec.AS, Max: spec.AS}
	if spec.AS > 0 {
		if _, _, e := syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_AS, uintptr(unsafe.Pointer(&rl)), 0, 0, 0); e != 0 {
			shimFailRaw(failMsg)
		}
	}
	syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	shimFailRaw(failMsg)
}

// shimFail reports on stderr (the task's output) and exits like a shell
// that could not run a command.
func shimFail(msg string) {
	os.Stderr.WriteString("jetway shim: " + msg + "\n")
	os.Exit(127)
}

// shimFailRaw is shimFail without allocating, for after RLIMIT_AS is set.
func shimFailRaw(msg []byte) {
	syscall.RawSyscall(unix.SYS_WRITE, 2, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
	syscall.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
}

// wrapInShim rewrites cmd-like fields so that the shim runs first.
func wrapInShim(path string, args, env []string, spec shimSpec) (string, []string, []string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return "", nil, nil, err
	}
	argv := append([]string{"jetway-shim", path}, args...)
	return shimPath, argv, append(env, shimEnv+"="+string(b)), nil
}
