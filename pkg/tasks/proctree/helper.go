package proctree

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// The confinement helper. Go cannot set rlimits, join v1 cgroups or
// confine a child between fork and exec, so a tree that needs any of it
// starts as the helper (confiner/confine.c), which does it to itself and
// then execs the command. The helper is a separate small static program,
// not this binary re-executed: a dynamically linked jetway would run its
// loader (LD_AUDIT, LD_PRELOAD, GCONV_PATH…) with the command's
// environment before any restriction, and every package's init with it.
// It is written in C because a Go helper pays the Go runtime's start and
// a multi-threaded exec at every job start (about 1.2 ms, measured); it
// decides nothing: this package compiles every decision into the steps it
// runs (program.go). It starts with an empty environment and reads its
// program from a descriptor.
//
// Where it comes from: `make build` compiles it and embeds it in jetway
// (build tag jetway_confiner, helper_embed.go); otherwise (go test, go
// run) it is compiled once from its source into the user's cache with
// the C compiler (helper_build.go). Either way its bytes are copied into
// a sealed memfd at first use and executed from there (/proc/self/fd/N),
// so no file on disk is trusted at start time and a binary replaced by a
// deploy keeps starting the helper it was built with.

// helperName is the helper's argv[0] and memfd name.
const helperName = "jetway-confine"

var (
	helperOnce sync.Once
	helperExe  string // /proc/self/fd/N of the sealed memfd
	helperFD   int
	helperID   [2]uint64 // the memfd's device and inode
	helperErr  error
)

// HelperReady loads the helper now and says why it cannot be had, if it
// cannot: every limited or confined start would fail with that error.
func HelperReady() error {
	_, err := helperPath()
	return err
}

// helperPath is the path the helper is executed by, loading it at the
// first call.
func helperPath() (string, error) {
	helperOnce.Do(func() {
		b, err := helperBytes()
		if err != nil {
			helperErr = fmt.Errorf("proctree: the confinement helper: %w", err)
			return
		}
		fd, err := sealedMemfd(b)
		if err != nil {
			helperErr = fmt.Errorf("proctree: load the confinement helper into memory: %w", err)
			return
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			helperErr = fmt.Errorf("proctree: the confinement helper's memfd: %w", err)
			return
		}
		helperExe, helperFD, helperID = "/proc/self/fd/"+strconv.Itoa(fd), fd, [2]uint64{st.Dev, st.Ino}
		releaseHelperBytes()
	})
	if helperErr != nil {
		return "", helperErr
	}
	// The descriptor is the helper's for the life of the process; should
	// other code close it by a stale number, the next start would exec
	// whatever took the number. Checked at every start: one fstat.
	var st unix.Stat_t
	if err := unix.Fstat(helperFD, &st); err != nil || [2]uint64{st.Dev, st.Ino} != helperID {
		return "", fmt.Errorf("proctree: descriptor %d no longer holds the confinement helper (closed elsewhere by a stale number?): %v", helperFD, err)
	}
	return helperExe, nil
}

// mfdExec is MFD_EXEC (Linux 6.3): asks for an executable memfd where
// vm.memfd_noexec would otherwise make it non-executable.
const mfdExec = 0x10

// sealedMemfd copies b into a memfd sealed against every change and
// returns its descriptor, close-on-exec and numbered 64 or higher, so the
// child's own descriptors (0-3, and the few os/exec moves above them)
// never land on it before the exec that names it.
func sealedMemfd(b []byte) (int, error) {
	fd, err := unix.MemfdCreate(helperName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|mfdExec)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate(helperName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	// Our first descriptor of it: the one handed back is its duplicate,
	// so closing this one cannot lose anything.
	defer func() { _ = unix.Close(fd) }()
	for off := 0; off < len(b); {
		n, err := unix.Write(fd, b[off:])
		if err != nil {
			return -1, fmt.Errorf("write the memfd: %w", err)
		}
		off += n
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return -1, fmt.Errorf("seal the memfd: %w", err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 64)
	if err != nil {
		return -1, fmt.Errorf("move the memfd: %w", err)
	}
	return high, nil
}

// specSource makes the file the helper reads its program from (a test
// holds the helper at its read to look at it).
var specSource = specFile

// specFile is prog in a memfd read from its start: no pipe to fill (an MCP
// server's environment may be large), nothing on disk.
func specFile(prog []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("jetway-confine-spec", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("proctree: the helper's program: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "jetway-confine-spec")
	if _, err := f.Write(prog); err != nil {
		_ = f.Close() // a memfd: the write error is the one to report
		return nil, fmt.Errorf("proctree: write the helper's program: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		_ = f.Close() // a memfd: the write error is the one to report
		return nil, fmt.Errorf("proctree: the helper's program: %w", err)
	}
	return f, nil
}

// wrapInHelper rewrites cmd so that the helper runs first, with spec (the
// command's path, arguments, environment and directory filled in from
// cmd) compiled into its program on descriptor confspec.FD and an empty
// environment of its own. The returned files are the program's and the
// descriptors it passes; close them once cmd has started.
func wrapInHelper(cmd *exec.Cmd, spec confspec.Spec) ([]*os.File, error) {
	if len(cmd.ExtraFiles) > 0 {
		return nil, errors.New("proctree: a command started through the confinement helper may not pass ExtraFiles")
	}
	exe, err := helperPath()
	if err != nil {
		return nil, err
	}
	spec.Path, spec.Args, spec.Env, spec.Dir = cmd.Path, cmd.Args, cmd.Env, cmd.Dir
	prog, err := compile(spec)
	if err != nil {
		return nil, err
	}
	f, err := specSource(prog.b)
	if err != nil {
		prog.close()
		return nil, err
	}
	cmd.Path, cmd.Args, cmd.Env = exe, []string{helperName}, []string{}
	cmd.ExtraFiles = append([]*os.File{f}, prog.files...)
	return cmd.ExtraFiles, nil
}

var (
	viewOnce sync.Once
	viewOK   bool
	viewWhy  string
)

// ViewAvailable reports whether confined trees get a file system view of
// their own (see confspec.Confinement.View), probing once per process by
// starting the helper in the namespaces it needs and letting it build
// one; why says what failed when not. Without a view, confined trees may
// not create AF_UNIX sockets at all.
func ViewAvailable() (ok bool, why string) {
	viewOnce.Do(func() { viewOK, viewWhy = probeView() })
	return viewOK, viewWhy
}

func probeView() (bool, string) {
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	files, err := wrapInHelper(cmd, confspec.Spec{Probe: true, Confine: &confspec.Confinement{View: true, ReadOnlyDirs: []string{"/usr"}}})
	if err != nil {
		return false, err.Error()
	}
	defer closeAll(files)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return false, fmt.Sprintf("cannot start the helper in a mount namespace of its own: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		err = <-done
	}
	line, _, _ := strings.Cut(out.String(), "\n")
	if err != nil || line != "view" {
		return false, strings.TrimSpace(fmt.Sprintf("%s %v", line, err))
	}
	return true, ""
}

// closeAll closes files of ours that a started child holds copies of.
func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close() // the child has its own copy, or never started
	}
}
