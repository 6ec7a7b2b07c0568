// Package confspec is what a confined command may reach (Confinement)
// and what its confinement helper is to do (Spec), which
// pkg/tasks/proctree compiles into the helper's program. It imports only
// the standard library, so the agent profiles' validation can use its
// network modes without the process tree code.
package confspec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FD is the descriptor the helper reads its program from; descriptors it
// is passed (a Landlock rule set) follow it. The program travels neither
// in the environment nor in argv: the helper starts with an empty
// environment, and nothing the command supplies reaches it before every
// restriction holds.
const FD = 3

// Network modes of a confined command (an agent profile's network field).
const (
	// NetworkNone: sockets of every family but AF_UNIX are refused
	// (seccomp), and TCP bind and connect too (Landlock ABI 4+).
	NetworkNone = "none"
	// NetworkOutbound: IP sockets are allowed, TCP bind (listening) is
	// refused (Landlock ABI 4+); other families stay refused.
	NetworkOutbound = "outbound"
	// NetworkAll: no network restriction.
	NetworkAll = "all"
)

// ValidNetwork reports whether s names a network mode ("" is none).
func ValidNetwork(s string) bool {
	switch s {
	case "", NetworkNone, NetworkOutbound, NetworkAll:
		return true
	}
	return false
}

// Spec is what the helper does, before proctree compiles it into steps.
type Spec struct {
	// Path, Args, Env and Dir are the command, as exec.Cmd has them: the
	// helper chdirs to Dir and execve's Path with Args and Env, last.
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
	// Join are v1 cgroup directories to enter (cgroup.procs).
	Join []string `json:"join,omitempty"`
	// CPU (seconds), FSize and AS (bytes) are RLIMIT_CPU, RLIMIT_FSIZE
	// and RLIMIT_AS; 0 leaves the limit as it is.
	CPU   uint64 `json:"cpu,omitempty"`
	FSize uint64 `json:"fsize,omitempty"`
	AS    uint64 `json:"as,omitempty"`
	// Confine, when set, is what the command may reach.
	Confine *Confinement `json:"confine,omitempty"`
	// Probe asks the helper to report on stdout whether it could build a
	// file system view (see Confinement.View) and exit, running nothing.
	Probe bool `json:"probe,omitempty"`
}

// Confinement is what a tree may reach of the file system (Landlock) and
// of the network (seccomp and Landlock), and whether it gets a file system
// view of its own. Everything not listed is refused: reading, writing,
// listing and executing (stat of a known path is not, Landlock does not
// govern it).
type Confinement struct {
	// ReadWrite are directories the tree may read, write, create in,
	// execute from, and rename or link within and between.
	ReadWrite []string `json:"rw,omitempty"`
	// ReadOnlyDirs and ReadOnlyFiles may be read and executed. A missing
	// one is skipped.
	ReadOnlyDirs  []string `json:"rod,omitempty"`
	ReadOnlyFiles []string `json:"rof,omitempty"`
	// Devices are files (device nodes such as /dev/null) the tree may read
	// and write, without ioctls. A missing one is skipped.
	Devices []string `json:"dev,omitempty"`
	// Network is NetworkNone (also ""), NetworkOutbound or NetworkAll.
	Network string `json:"net,omitempty"`
	// View: the helper runs the command in a mount namespace of its own
	// whose root is an empty tmpfs holding only the paths above (bound
	// from the host), so a pathname unix socket anywhere else does not
	// exist for it; Landlock does not govern connect(2) on those. The
	// worker sets it where it can create the namespace (root, or a user
	// namespace); without a view, AF_UNIX sockets are refused as well
	// (socketpair still works).
	View bool `json:"view,omitempty"`
}

// AddReadOnly adds paths (directories or files, symlinks resolved) to c's
// read-only part; a path that does not exist is an error, to catch a
// mistyped flag.
func (c *Confinement) AddReadOnly(paths ...string) error {
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("proctree: read-only path %s: %w", p, err)
		}
		real, err = filepath.Abs(real)
		if err != nil {
			return fmt.Errorf("proctree: read-only path %s: %w", p, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("proctree: read-only path %s: %w", p, err)
		}
		if fi.IsDir() {
			c.ReadOnlyDirs = append(c.ReadOnlyDirs, real)
		} else {
			c.ReadOnlyFiles = append(c.ReadOnlyFiles, real)
		}
	}
	return nil
}

// Overlaps reports the read-only path of c that contains dir or lies
// inside it, if any: a worker whose workspaces lie below a read-only path,
// or one given a path inside its root to read, would let jobs read other
// sessions' workspaces.
func (c *Confinement) Overlaps(dir string) (string, bool) {
	for _, p := range append(append([]string(nil), c.ReadOnlyDirs...), c.ReadOnlyFiles...) {
		if Within(dir, p) || Within(p, dir) {
			return p, true
		}
	}
	return "", false
}

// Within reports whether path p is d or lies below it.
func Within(p, d string) bool {
	return p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/")
}
