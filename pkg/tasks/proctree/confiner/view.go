package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// The view. Landlock does not govern connect(2) on pathname unix sockets,
// so a command could reach any listening socket whose path it can name
// (a root tmux server's, a container daemon's, another session's). The
// worker starts the helper in a mount namespace of its own (and a user
// namespace of its own where the worker is not root); here its root is
// replaced by an empty tmpfs into which only the confinement's paths are
// bound, so every other path, and every socket on it, does not exist for
// the command. Landlock still decides what may be done with the paths
// that do exist.

// stageDirs are where the new root is mounted before pivot_root; the first
// that exists and holds none of the bound paths is used.
var stageDirs = []string{"/mnt", "/media", "/srv", "/opt", "/boot", "/tmp", "/var/tmp", "/run", "/home", "/root"}

// viewPaths are the host paths to bind: every path of c, with /etc bound
// whole (Landlock refuses its secrets; binding each of its hundred-odd
// entries would cost a mount each) and /proc whole (Landlock refuses all
// of it but a few files, yet readlink of /proc/self/exe, which Landlock
// does not govern, is how go and others find themselves; another
// process's /proc/<pid>/root and cwd links need ptrace access, which the
// Landlock scope refuses), and paths inside another left to that one's
// recursive bind.
func viewPaths(c *confspec.Confinement) []string {
	var all []string
	for _, list := range [][]string{c.ReadOnlyDirs, c.ReadOnlyFiles, c.Devices, c.ReadWrite} {
		for _, p := range list {
			for _, whole := range []string{"/etc", "/proc"} {
				if confspec.Within(p, whole) {
					p = whole
				}
			}
			all = append(all, filepath.Clean(p))
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	out := all[:0]
	for _, p := range all {
		if len(out) > 0 && confspec.Within(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// buildView makes this process's root an empty tmpfs holding c's paths.
func buildView(c *confspec.Confinement) error {
	// Nothing mounted here may propagate back to the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	paths := viewPaths(c)
	stage := ""
	for _, d := range stageDirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		if !slices.ContainsFunc(paths, func(p string) bool { return confspec.Within(p, d) }) {
			stage = d
			break
		}
	}
	if stage == "" {
		return errors.New("no directory to build the view in")
	}
	if err := unix.Mount("jetway-view", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", stage, err)
	}
	for _, p := range paths {
		if err := bindInto(stage, p); err != nil {
			return err
		}
	}
	if err := unix.Chdir(stage); err != nil {
		return fmt.Errorf("chdir %s: %w", stage, err)
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching
	// it leaves the tmpfs as the only root there is.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	// Read-only from here: nothing may be created next to the bound paths.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make the view's root read-only: %w", err)
	}
	return unix.Chdir("/")
}

// bindInto binds host path p at the same path below stage; a missing p is
// skipped and a symlink (/bin -> usr/bin) is copied as a symlink.
func bindInto(stage, p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	target := filepath.Join(stage, p)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		link, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("view: %w", err)
		}
		if err := os.Symlink(link, target); err != nil {
			return fmt.Errorf("view: %w", err)
		}
		return nil
	case fi.IsDir():
		err = os.Mkdir(target, 0o755)
	default:
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			err = f.Close()
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("view: mount point for %s: %w", p, err)
	}
	if err := unix.Mount(p, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("view: bind %s: %w", p, err)
	}
	return nil
}
