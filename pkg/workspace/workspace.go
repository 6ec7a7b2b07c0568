// Package workspace is a session's working directory and the file tools a
// model uses on it (read, write, edit, glob, grep), confined so that no path
// the model writes reaches outside the directory.
//
// Confinement has two layers. Every path is first resolved by the package
// itself, component by component, following symbolic links and ".." the way
// the kernel does, and refused with ErrOutsideWorkspace if it leads outside
// (by "..", as an absolute path elsewhere, or through a link, dangling or
// not); the result is a path inside the workspace without symlinks. The
// operation then runs through an os.Root opened on the directory, whose
// openat walk keeps it inside even if the tree changes between the check and
// the use. Resolving first (rather than leaving it all to os.Root) gives the
// model a clear error naming its path and the link, and accepts absolute
// symbolic links that point inside, which os.Root refuses. The requests and results are plain structs with JSON
// tags, because the jobs service serves them over NATS.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideWorkspace is matched (errors.Is) by every refusal of a path that
// leads outside the workspace; the error itself is an *OutsideError naming
// the path.
var ErrOutsideWorkspace = errors.New("path is outside the workspace")

// OutsideError is the refusal of a path that leads outside the workspace.
type OutsideError struct {
	Path   string // the path as asked for
	Reason string // how it leads outside
}

func (e *OutsideError) Error() string {
	return fmt.Sprintf("workspace: %q is outside the workspace: %s", e.Path, e.Reason)
}

// Is makes errors.Is(err, ErrOutsideWorkspace) hold.
func (e *OutsideError) Is(target error) bool { return target == ErrOutsideWorkspace }

// ErrInvalidID is matched by a tenant or session id that is not 1–64 of
// [A-Za-z0-9_-].
var ErrInvalidID = errors.New("invalid id")

// ValidID checks a tenant or session id: 1–64 of [A-Za-z0-9_-], the same
// rule as the NATS subjects, so an id is always one safe path element.
func ValidID(kind, id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("workspace: %s id %q must be 1 to 64 characters: %w", kind, id, ErrInvalidID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("workspace: %s id %q may hold only A-Z a-z 0-9 _ -: %w", kind, id, ErrInvalidID)
		}
	}
	return nil
}

// SessionDir is the directory of a session's workspace under base:
// base/tenant/session, after checking both ids with ValidID.
func SessionDir(base, tenant, session string) (string, error) {
	if base == "" {
		return "", errors.New("workspace: empty base directory")
	}
	if err := ValidID("tenant", tenant); err != nil {
		return "", err
	}
	if err := ValidID("session", session); err != nil {
		return "", err
	}
	return filepath.Join(base, tenant, session), nil
}

// Config holds the limits of a workspace's tools; a zero field takes the
// default named next to it.
type Config struct {
	// ReadLines is how many lines Read returns when the request names no
	// limit (2000).
	ReadLines int
	// MaxLineBytes cuts longer lines in Read and Grep output (2000).
	MaxLineBytes int
	// MaxReadBytes caps the text one Read returns (256 KiB).
	MaxReadBytes int
	// MaxFileBytes is the largest file Write accepts and Edit and Grep open
	// (16 MiB).
	MaxFileBytes int64
	// MaxImageBytes is the largest image a read returns
	// (DefaultMaxImageBytes); a bigger one is refused, never cut.
	MaxImageBytes int64
	// MaxGlobResults caps the paths one Glob returns (1000).
	MaxGlobResults int
	// MaxGrepResults caps the lines one Grep returns (1000; a request
	// without a limit gets 100).
	MaxGrepResults int
	// MaxWalk bounds the directory entries one Glob or Grep visits, so a
	// huge tree (node_modules) cannot stall the worker (200000).
	MaxWalk int
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.ReadLines, 2000)
	def(&c.MaxLineBytes, 2000)
	def(&c.MaxReadBytes, 256<<10)
	def(&c.MaxGlobResults, 1000)
	def(&c.MaxGrepResults, 1000)
	def(&c.MaxWalk, 200000)
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 16 << 20
	}
	if c.MaxImageBytes <= 0 {
		c.MaxImageBytes = DefaultMaxImageBytes
	}
	return c
}

// Workspace is one session's directory. Its methods are safe for concurrent
// use; two writers of the same file race like two processes would, each
// write being atomic.
type Workspace struct {
	dir   string   // absolute, symlinks resolved
	alias string   // the absolute directory as given, when it differs from dir
	root  *os.Root // every file operation goes through it
	cfg   Config
}

// Open opens the workspace at dir with the default limits, creating the
// directory if it does not exist.
func Open(dir string) (*Workspace, error) { return Config{}.Open(dir) }

// Open opens the workspace at dir with c's limits, creating the directory
// (and its parents) if it does not exist.
func (c Config) Open(dir string) (*Workspace, error) {
	if dir == "" {
		return nil, errors.New("workspace: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace: directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("workspace: create %s: %w", abs, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: resolve %s: %w", abs, err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("workspace: open %s: %w", real, err)
	}
	w := &Workspace{dir: real, root: root, cfg: c.withDefaults()}
	if abs != real {
		w.alias = abs
	}
	return w, nil
}

// Dir is the workspace's absolute directory, symbolic links resolved.
func (w *Workspace) Dir() string { return w.dir }

// Close releases the directory handle.
func (w *Workspace) Close() error { return w.root.Close() }

// maxLinks bounds the symbolic links one resolution follows (as Linux does),
// which also ends loops.
const maxLinks = 40

// Resolve returns where name leads inside the workspace, as a slash-separated
// path relative to it without symbolic links or "..", or "." for the
// workspace itself. name may be relative to the workspace or absolute inside
// it. Components that do not exist yet resolve lexically (a write may create
// them). A name that leads outside — by "..", as an absolute path elsewhere,
// or through a symbolic link, dangling or not — is refused with an
// *OutsideError.
func (w *Workspace) Resolve(name string) (string, error) {
	rel, err := w.resolve(name)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

// resolve is Resolve in OS path syntax.
func (w *Workspace) resolve(name string) (string, error) {
	if name == "" {
		return "", errors.New("workspace: empty path")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("workspace: path %q holds a NUL byte", name)
	}
	rel, ok := w.relative(name)
	if !ok {
		return "", &OutsideError{Path: name, Reason: "an absolute path elsewhere"}
	}
	// pending holds the components still to walk, each with the symbolic
	// link whose target it came from ("" for the name's own), so that a
	// refusal can say which link leads out.
	type component struct{ part, link string }
	var pending []component
	for _, p := range splitPath(rel) {
		pending = append(pending, component{p, ""})
	}
	var done []string // resolved components: existing ones hold no symlink
	links := 0
	for len(pending) > 0 {
		part, via := pending[0].part, pending[0].link
		pending = pending[1:]
		switch part {
		case ".", "":
			continue
		case "..":
			if len(done) == 0 {
				reason := "it climbs above the workspace with .."
				if via != "" {
					reason = fmt.Sprintf("symbolic link %s points outside", via)
				}
				return "", &OutsideError{Path: name, Reason: reason}
			}
			done = done[:len(done)-1]
			continue
		}
		cand := filepath.Join(append(done, part)...)
		fi, err := w.root.Lstat(cand)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				done = append(done, part)
				continue
			}
			if isEscape(err) {
				return "", &OutsideError{Path: name, Reason: "the directory tree changed under it"}
			}
			return "", fmt.Errorf("workspace: resolve %q: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, part)
			continue
		}
		links++
		if links > maxLinks {
			return "", fmt.Errorf("workspace: resolve %q: more than %d symbolic links (a loop?)", name, maxLinks)
		}
		target, err := w.root.Readlink(cand)
		if err != nil {
			return "", fmt.Errorf("workspace: resolve %q: read link %s: %w", name, cand, err)
		}
		if filepath.IsAbs(target) {
			t, ok := w.relative(target)
			if !ok {
				return "", &OutsideError{Path: name, Reason: fmt.Sprintf("symbolic link %s points outside", filepath.ToSlash(cand))}
			}
			done = done[:0]
			target = t
		}
		// A relative target is relative to the link's directory, which is
		// what done holds now; its ".." are checked by this same loop, with
		// the real meaning of ".." after a link (the target's parent).
		var next []component
		for _, p := range splitPath(target) {
			next = append(next, component{p, filepath.ToSlash(cand)})
		}
		pending = append(next, pending...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return filepath.Join(done...), nil
}

// relative turns name into a path relative to the workspace, reporting
// false for an absolute path outside it. A relative name is kept as it is:
// its ".." are resolved after the symbolic links before them, as the kernel
// does. An absolute one is cleaned lexically first.
func (w *Workspace) relative(name string) (string, bool) {
	if !filepath.IsAbs(name) {
		return name, true
	}
	clean := filepath.Clean(name)
	for _, base := range []string{w.dir, w.alias} {
		if base == "" {
			continue
		}
		if rel, err := filepath.Rel(base, clean); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return rel, true
		}
	}
	return "", false
}

func splitPath(p string) []string {
	return strings.Split(filepath.ToSlash(p), "/")
}

// isEscape reports os.Root's refusal of a path that escapes it. The standard
// library does not export that error, only its text.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}

// rootErr maps os.Root's escape refusal to an *OutsideError and wraps other
// errors with the operation and path.
func rootErr(op, name string, err error) error {
	if isEscape(err) {
		return &OutsideError{Path: name, Reason: "the directory tree changed under it"}
	}
	return fmt.Errorf("workspace: %s %s: %w", op, name, err)
}
